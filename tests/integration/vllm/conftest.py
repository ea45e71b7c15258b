"""Fixtures that run the real vLLM OpenAI server (CPU build 0.32.0) on loopback.

The launcher lives in ``bench/vllm_server.py`` (shared with the benchmark scripts). When the
cached venv is missing, every test that asks for a server FAILS with the command to run: these
tests are selected explicitly (``pytest -m vllm``, run by ``make test``), so a silent skip would
hide that nothing was measured.

One engine start per test module (module-scoped fixtures, stopped by PID at the end), because a
start costs 30-90 s on a busy two-core machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.integration.engines import find_or_fail, load_bench, server_factory

launcher = load_bench("vllm_server")


@pytest.fixture(scope="session")
def vllm_launcher() -> ModuleType:
    """The launcher module (VllmServer, parse_kv_log, start_server, ...)."""
    return launcher


@pytest.fixture(scope="session")
def vllm() -> Any:
    return find_or_fail(launcher, launcher.find_vllm)


@pytest.fixture(scope="session")
def tiny_llama(vllm: Any) -> Path:
    """Tiny llama directory (GQA 8/2 heads, head_dim 32, 4 layers) with its own tokenizer."""
    path: Path = vllm.model("llama")
    return path


@pytest.fixture(scope="module")
def module_server_factory(
    vllm: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Any]]:
    """Factory ``start(model, args, **kw) -> VllmServer``; every server stopped at module end."""

    def make(log: Path, model: Path, args: list[str], **kw: Any) -> Any:
        return launcher.VllmServer(
            python=vllm.python,
            model=model,
            log_path=log,
            args=list(args),
            version=vllm.version,
            **kw,
        )

    with server_factory(tmp_path_factory.mktemp("vllm"), "vllm", make) as start:
        yield start


#: the suite's default engine: tiny GQA llama, bf16 KV, the CPU default block size (128),
#: prefix caching on, 1 GiB of KV (VLLM_CPU_KVCACHE_SPACE=1), max_model_len 4096
DEFAULT_ARGS = ["--enable-prefix-caching"]


@pytest.fixture(scope="session")
def vllm_server(
    vllm: Any, tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One default server shared by the bench, audit and calibrate modules (one start)."""
    log = tmp_path_factory.mktemp("vllm-default") / "vllm.log"
    with launcher.start_server(vllm, tiny_llama, log, DEFAULT_ARGS) as server:
        yield server
