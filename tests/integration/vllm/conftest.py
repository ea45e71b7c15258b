"""Fixtures that run the real vLLM OpenAI server (CPU build 0.32.0) on loopback.

The launcher lives in ``bench/vllm_server.py`` (shared with the benchmark scripts). When the
cached venv is missing, every test that asks for a server FAILS with the command to run: these
tests are selected explicitly (``pytest -m vllm``, run by ``make test``), so a silent skip would
hide that nothing was measured.

One engine start per test module (module-scoped fixtures, stopped by PID at the end), because a
start costs 30-90 s on a busy two-core machine.
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
    name = "kvbudget_bench_vllm_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / "vllm_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


launcher = _load_launcher()


@pytest.fixture(scope="session")
def vllm_launcher() -> ModuleType:
    """The launcher module (VllmServer, parse_kv_log, parse_prometheus, ...)."""
    return launcher


@pytest.fixture(scope="session")
def vllm() -> Any:
    try:
        return launcher.find_vllm()
    except launcher.NotBuiltError as exc:
        pytest.fail(str(exc), pytrace=False)


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
    servers: list[Any] = []
    logs = tmp_path_factory.mktemp("vllm")

    def start(model: Path, args: list[str], **kw: Any) -> Any:
        log = logs / f"vllm-{len(servers)}.log"
        server = launcher.VllmServer(
            python=vllm.python,
            model=model,
            log_path=log,
            args=list(args),
            version=vllm.version,
            **kw,
        )
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


#: the suite's default engine: tiny GQA llama, bf16 KV, the CPU default block size (128),
#: prefix caching on, 1 GiB of KV (VLLM_CPU_KVCACHE_SPACE=1), max_model_len 4096
DEFAULT_ARGS = ["--enable-prefix-caching"]


@pytest.fixture(scope="session")
def vllm_server(
    vllm: Any, tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One default server shared by the bench, audit and calibrate modules (one start)."""
    log = tmp_path_factory.mktemp("vllm-default") / "vllm.log"
    server = launcher.start_server(vllm, tiny_llama, log, DEFAULT_ARGS)
    try:
        yield server
    finally:
        server.stop()
