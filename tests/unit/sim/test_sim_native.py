"""The mypyc build of the simulator (kvbudget.sim.native): used only when it matches the sources.

The first tests check the matching rule on a made-up build (no compiler needed). The others run
child processes against the real build that ``make install-test`` compiled
(scripts/build_mypyc.py): an unchanged copy of the sources loads it, an edited compiled module
or an edited dependency falls back to pure Python, and so does ``KVBUDGET_PURE_PYTHON=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvbudget
import kvbudget.sim.blockpool
from kvbudget.sim import native

REPO = Path(__file__).resolve().parents[3]
SRC = Path(kvbudget.__file__).resolve().parents[1]
NO_BUILD = (
    "no mypyc build matches these sources: run `make install-test` (it runs scripts/build_mypyc.py)"
)


def _fake_tree(root: Path) -> Path:
    """A source tree with two 'compiled' modules and one dependency."""
    sim = root / "src" / "kvbudget" / "sim"
    sim.mkdir(parents=True)
    (root / "src" / "kvbudget" / "errors.py").write_text("class E(Exception): ...\n")
    (sim / "a.py").write_text("X = 1\n")
    (sim / "b.py").write_text("from kvbudget.errors import E\n")
    return root / "src"


def _fake_build(src: Path, modules: tuple[str, ...], build: Path | None = None) -> Path:
    """A made-up build in the user cache, or at ``build`` (a wheel's ``kvbudget/sim/_mypyc``)."""
    build = build or native.cache_root() / native.source_key(src, modules) / "b0"
    build.mkdir(parents=True)
    files = ["kvbudget/errors.py", "kvbudget/sim/a.py", "kvbudget/sim/b.py"]
    shims = [f"{m}.so" for m in modules]
    for name in ["g__mypyc.so", *shims]:
        (build / name).write_bytes(b"")
    manifest = {
        "modules": list(modules),
        "abi": native.abi_tag(),
        "mypyc_version": "9.9",
        "group_lib": "g__mypyc.so",
        "shims": shims,
        "files": {f: native.file_digest(src / f) for f in files},
    }
    (build / native.MANIFEST).write_text(json.dumps(manifest))
    return build


def test_a_build_is_found_only_while_every_source_it_read_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = _fake_tree(tmp_path)
    modules = ("a", "b")
    build = _fake_build(src, modules)
    found = native.find_build(src, modules)
    assert found is not None and found[0] == build

    dep = src / "kvbudget" / "errors.py"
    dep.write_text(dep.read_text() + "# edited\n")  # a dependency, not compiled itself
    assert native.find_build(src, modules) is None
    dep.write_text("class E(Exception): ...\n")
    assert native.find_build(src, modules) is not None

    a = src / "kvbudget" / "sim" / "a.py"
    a.write_text("X = 2\n")  # a compiled module: another source key, no build under it
    assert native.find_build(src, modules) is None
    a.write_text("X = 1\n")
    assert native.find_build(src, modules) is not None

    # another module list is another key; a missing extension module is no build
    assert native.find_build(src, ("a",)) is None
    (build / "b.so").unlink()
    assert native.find_build(src, modules) is None


def test_a_manifest_for_another_interpreter_is_no_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = _fake_tree(tmp_path)
    build = _fake_build(src, ("a", "b"))
    manifest = json.loads((build / native.MANIFEST).read_text())
    (build / native.MANIFEST).write_text(json.dumps({**manifest, "abi": "cpython-399"}))
    assert native.find_build(src, ("a", "b")) is None
    (build / native.MANIFEST).write_text("{not json")
    assert native.find_build(src, ("a", "b")) is None


def test_a_wheels_own_build_comes_first_and_is_checked_like_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed wheel carries its build in ``kvbudget/sim/_mypyc``: used before the cache,
    only while its sources are unchanged, for any patch release of the interpreter it was
    built for (the wheel's tag chose the interpreter), never for another one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = _fake_tree(tmp_path)
    modules = ("a", "b")
    cached = _fake_build(src, modules)
    shipped = _fake_build(src, modules, src / "kvbudget" / "sim" / native.SHIPPED)
    found = native.find_build(src, modules)
    assert found is not None and found[0] == shipped

    manifest = json.loads((shipped / native.MANIFEST).read_text())
    suffix = native.abi_tag().split(":", 1)[0]
    other_patch = {**manifest, "abi": f"{suffix}:3.11.99 (another build)"}
    (shipped / native.MANIFEST).write_text(json.dumps(other_patch))
    found = native.find_build(src, modules)
    assert found is not None and found[0] == shipped
    (shipped / native.MANIFEST).write_text(json.dumps({**manifest, "abi": "cpython-399:3.99"}))
    found = native.find_build(src, modules)
    assert found is not None and found[0] == cached  # the cache's, for this exact interpreter

    (shipped / native.MANIFEST).write_text(json.dumps(manifest))
    dep = src / "kvbudget" / "errors.py"
    dep.write_text(dep.read_text() + "# edited\n")  # an installed source edited by hand
    assert native.find_build(src, modules) is None


_PROBE = (
    "import json, kvbudget, kvbudget.sim.blockpool as b, kvbudget.sim.kvcache as k; "
    "from kvbudget.sim import native; "
    "print(json.dumps([kvbudget.__file__, b.__file__, k.__file__, native.build_label()]))"
)


def _probe(src: Path, **env: str) -> tuple[str, str, str, str]:
    child_env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    child_env.update(env, PYTHONPATH=str(src))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    pkg, blockpool, kvcache, label = json.loads(out)
    assert Path(pkg).resolve().is_relative_to(src.resolve())  # the copy ran, not the checkout
    return pkg, blockpool, kvcache, label


def _copy_sources(tmp_path: Path) -> Path:
    dest = tmp_path / "src"
    shutil.copytree(SRC / "kvbudget", dest / "kvbudget", ignore=shutil.ignore_patterns("*.so"))
    return dest


def test_the_build_is_used_for_these_sources_and_an_edit_falls_back_to_pure_python(
    tmp_path: Path,
) -> None:
    assert native.find_build() is not None, NO_BUILD
    src = _copy_sources(tmp_path)
    _, blockpool, kvcache, label = _probe(src)
    assert blockpool.endswith(".so") and kvcache.endswith(".so"), label
    assert label.startswith("compiled with mypyc "), label

    edited = src / "kvbudget" / "sim" / "kvcache.py"
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    _, blockpool, kvcache, label = _probe(src)
    assert kvcache == str(edited) and blockpool.endswith("blockpool.py")
    assert label == "pure Python (no mypyc build matches these sources)"


def test_an_edited_dependency_or_the_switch_gives_pure_python(tmp_path: Path) -> None:
    assert native.find_build() is not None, NO_BUILD
    src = _copy_sources(tmp_path)
    _, blockpool, _, label = _probe(src, **{native.PURE_ENV: "1"})
    assert blockpool.endswith("blockpool.py")
    assert label == f"pure Python ({native.PURE_ENV} set)"

    dep = src / "kvbudget" / "errors.py"  # imported by the compiled block pool, not compiled
    dep.write_text(dep.read_text() + "\n# edited after the build\n")
    _, blockpool, _, label = _probe(src)
    assert blockpool.endswith("blockpool.py")
    assert label == "pure Python (no mypyc build matches these sources)"


def test_this_session_runs_the_build_it_names() -> None:
    """``make test`` runs the suite on the compiled build and the sim tests again pure."""
    where = kvbudget.sim.blockpool.__file__ or ""
    if os.environ.get(native.PURE_ENV):
        assert where.endswith("blockpool.py")
        assert native.build_label() == f"pure Python ({native.PURE_ENV} set)"
    else:
        assert where.endswith(".so"), f"blockpool is pure Python here ({where}): {NO_BUILD}"
        assert native.build_label().startswith("compiled with mypyc ")


def test_a_rebuild_with_unchanged_sources_builds_nothing() -> None:
    assert native.find_build() is not None, NO_BUILD
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_mypyc.py")],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    assert "mypyc build up to date" in out, out
