"""The real engines' launchers for the tests: ``bench/<name>.py`` loaded once by file path
(bench/ is not a package), the cached build found or the test FAILED with the command that
builds it (a real-engine test never skips), and a factory that stops what it started."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_bench(stem: str) -> ModuleType:
    """``bench/<stem>.py`` as module ``kvbudget_bench_<stem>`` (loaded once per process)."""
    name = f"kvbudget_bench_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def find_or_fail(launcher: ModuleType, find: Callable[[], Any]) -> Any:
    """The cached engine build, or the test fails with the launcher's NotBuiltError message."""
    try:
        return find()
    except launcher.NotBuiltError as exc:
        pytest.fail(str(exc), pytrace=False)


@contextmanager
def server_factory(logs: Path, stem: str, make: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``start(*a, **kw)``: ``make(log_path, *a, **kw)`` then ``.start()``; on exit every server
    made here is stopped (a failed start included)."""
    servers: list[Any] = []

    def start(*args: Any, **kw: Any) -> Any:
        server = make(logs / f"{stem}-{len(servers)}.log", *args, **kw)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
