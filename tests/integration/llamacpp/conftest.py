"""Fixtures that run the real llama.cpp `llama-server` (CPU) on loopback.

The launcher lives in ``bench/llamacpp_server.py`` (shared with the benchmark). When the cached
binary is missing, every test that asks for a server FAILS with the command to run: these tests
are selected explicitly (``pytest -m llamacpp``), so a silent skip would hide that nothing was
measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.integration.engines import find_or_fail, load_bench, server_factory

launcher = load_bench("llamacpp_server")


@pytest.fixture(scope="session")
def llamacpp_launcher() -> ModuleType:
    """The launcher module (LlamaServer, parse_kv_log, stream_completion, ...)."""
    return launcher


@pytest.fixture(scope="session")
def llamacpp() -> Any:
    return find_or_fail(launcher, launcher.find_llamacpp)


@pytest.fixture
def start_llama_server(llamacpp: Any, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Factory: ``start_llama_server(model, *args) -> LlamaServer``; all stopped at teardown."""

    def make(log: Path, model: Path, *args: str) -> Any:
        return launcher.LlamaServer(
            binary=llamacpp.binary,
            model=model,
            log_path=log,
            args=list(args),
            version=llamacpp.version,
        )

    with server_factory(tmp_path, "llama-server", make) as start:
        yield start


@pytest.fixture(scope="module")
def shared_llama_server(llamacpp: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One f16 server for a whole test module: 4 slots of 2048 tokens, 2 threads."""
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    args = ["-c", "8192", "-np", "4", "-t", "2", "-ctk", "f16", "-ctv", "f16"]
    with launcher.start_server(llamacpp, llamacpp.model("llama"), log, args) as server:
        yield server
