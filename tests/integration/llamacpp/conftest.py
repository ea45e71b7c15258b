"""Fixtures that run the real llama.cpp `llama-server` (CPU) on loopback.

The launcher lives in ``bench/llamacpp_server.py`` (shared with the benchmark). When the cached
binary is missing, every test that asks for a server FAILS with the command to run: these tests
are selected explicitly (``pytest -m llamacpp``), so a silent skip would hide that nothing was
measured.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


def _load_launcher() -> ModuleType:
    name = "kvbudget_bench_llamacpp_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / "llamacpp_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


launcher = _load_launcher()


@pytest.fixture(scope="session")
def llamacpp_launcher() -> ModuleType:
    """The launcher module (LlamaServer, parse_kv_log, parse_prometheus, ...)."""
    return launcher


@pytest.fixture(scope="session")
def llamacpp() -> Any:
    try:
        return launcher.find_llamacpp()
    except launcher.NotBuiltError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def start_llama_server(llamacpp: Any, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Factory: ``start_llama_server(model, *args) -> LlamaServer``; all stopped at teardown."""
    servers: list[Any] = []

    def start(model: Path, *args: str) -> Any:
        log = tmp_path / f"llama-server-{len(servers)}.log"
        server = launcher.LlamaServer(
            binary=llamacpp.binary, model=model, log_path=log, args=list(args)
        )
        server.version = llamacpp.version
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def shared_llama_server(llamacpp: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One f16 server for a whole test module: 4 slots of 2048 tokens, 2 threads."""
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    args = ["-c", "8192", "-np", "4", "-t", "2", "-ctk", "f16", "-ctv", "f16"]
    server = launcher.start_server(llamacpp, llamacpp.model("llama"), log, args)
    try:
        yield server
    finally:
        server.stop()
