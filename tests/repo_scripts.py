"""The repository's scripts as modules: ``bench/`` and ``scripts/`` are not packages, so the tests
that check a published figure against its generator load the generator by file path (once per
process, under ``kvbudget_<dir>_<stem>``; dataclasses resolve annotations through sys.modules)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str) -> ModuleType:
    """``REPO_ROOT / relative_path`` (e.g. ``"bench/pool_accuracy.py"``) as a module."""
    path = REPO_ROOT / relative_path
    name = f"kvbudget_{path.parent.name}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
