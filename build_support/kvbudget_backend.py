"""kvbudget's build backend: setuptools, asking for mypyc's build requirements only when it can use them.

Every hook is ``setuptools.build_meta``'s (``setup.py`` adds the mypyc step). A wheel or an
editable install also asks for the pinned mypy (its mypyc compiles the simulator) and the two
runtime packages mypy reads the simulator's types from (pydantic, whose mypy plugin the
configuration names, and numpy), all taken from ``pyproject.toml``, unless ``KVBUDGET_MYPYC=0``
or no C compiler is found: a host that cannot compile downloads nothing for it. An sdist never
needs them.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # the hooks kvbudget takes unchanged
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mypyc_build

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

#: runtime packages whose types mypyc reads while compiling (the rest are ignored imports)
TYPED_DEPENDENCIES = ("pydantic", "numpy")


def _name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "-_."):
            return requirement[:i].lower()
    return requirement.lower()


def mypyc_requires(pyproject: Path) -> list[str]:
    """The pinned mypy (test extra) and the typed runtime dependencies, as ``pyproject.toml`` says."""
    project = tomllib.loads(pyproject.read_text())["project"]
    test = project["optional-dependencies"]["test"]
    mypy = [r for r in test if _name(r) == "mypy"]
    typed = [r for r in project["dependencies"] if _name(r) in TYPED_DEPENDENCIES]
    if len(mypy) != 1 or len(typed) != len(TYPED_DEPENDENCIES):
        raise RuntimeError(
            f"{pyproject}: no single mypy pin in the test extra or no {TYPED_DEPENDENCIES}"
        )
    return [*mypy, *typed]


def _extra() -> list[str]:
    if mypyc_build.mode() == "off" or mypyc_build.compiler() is None:
        return []
    return mypyc_requires(Path("pyproject.toml"))


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return [*_setuptools.get_requires_for_build_wheel(config_settings), *_extra()]


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    return [*_setuptools.get_requires_for_build_editable(config_settings), *_extra()]
