"""The build backend asks for mypyc's build requirements only when it can compile.

``build_support/kvbudget_backend.py`` wraps setuptools; a wheel or editable build also gets the
mypy the test extra pins and the typed runtime dependencies, unless ``KVBUDGET_MYPYC=0`` or no C
compiler is found. The full compile is ``tests/integration/sim/test_sim_wheel.py``.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "build_support"))

import kvbudget_backend  # noqa: E402
import mypyc_build  # noqa: E402


def _pyproject() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_backend_is_the_one_pyproject_names() -> None:
    system = _pyproject()["build-system"]
    assert isinstance(system, dict)
    assert system["build-backend"] == "kvbudget_backend"
    assert system["backend-path"] == ["build_support"]


def test_a_host_with_a_compiler_asks_for_the_pinned_mypy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv(mypyc_build.MODE_ENV, raising=False)
    monkeypatch.setattr(mypyc_build, "compiler", lambda: "/usr/bin/cc")
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    (mypy_pin,) = [r for r in project["optional-dependencies"]["test"] if r.startswith("mypy=")]
    extra = kvbudget_backend.get_requires_for_build_wheel()
    assert mypy_pin in extra
    assert {r for r in extra if r.startswith(("pydantic", "numpy"))} == {
        r for r in project["dependencies"] if r.startswith(("pydantic>", "numpy>"))
    }
    assert mypy_pin in kvbudget_backend.get_requires_for_build_editable()
    assert not [r for r in kvbudget_backend.get_requires_for_build_sdist() if "mypy" in r]


@pytest.mark.parametrize("why", ["switched off", "no compiler"])
def test_a_host_that_cannot_compile_downloads_nothing_for_it(
    why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    if why == "switched off":
        monkeypatch.setenv(mypyc_build.MODE_ENV, "0")
    else:
        monkeypatch.delenv(mypyc_build.MODE_ENV, raising=False)
        monkeypatch.setattr(mypyc_build, "compiler", lambda: None)
    assert not [r for r in kvbudget_backend.get_requires_for_build_wheel() if "mypy" in r]
    assert not [r for r in kvbudget_backend.get_requires_for_build_editable() if "mypy" in r]


def test_an_unknown_switch_value_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mypyc_build.MODE_ENV, "fast")
    with pytest.raises(SystemExit) as err:
        mypyc_build.mode()
    assert str(err.value) == (
        "KVBUDGET_MYPYC='fast': not a choice; use auto (default), 0 (never) or 1 (must)"
    )
