"""The engine command is the lock, in each engine's own flag names (expected argv by hand)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvbudget.accept.plan.planfile import load_plan
from kvbudget.deploy.engine_args import engine_command
from kvbudget.errors import ConfigError
from tests.unit.deploy.conftest import DEMO_PLAN


def test_vllm_demo_lock_renders_vllm_flag_names() -> None:
    lock = load_plan(DEMO_PLAN).lock
    cmd = engine_command(lock)
    # the demo lock: TP 1, PP 1, max_model_len 16384, block 16, util 0.90, kv auto,
    # max_num_seqs 256, max_num_batched_tokens 8192, prefix caching on; engine.flags repeat
    # three of them and add nothing
    assert list(cmd.argv) == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B", "--host", "0.0.0.0", "--port", "8000",
        "--served-model-name", "meta-llama/Llama-3.1-8B",
        "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1",
        "--max-model-len", "16384", "--block-size", "16", "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "auto", "--max-num-seqs", "256", "--max-num-batched-tokens", "8192",
        "--enable-prefix-caching",
    ]  # fmt: skip
    assert cmd.health_path == "/health"


def test_vllm_shutdown_timeout_only_where_read_in_the_source() -> None:
    lock = load_plan(DEMO_PLAN).lock  # vLLM 0.11.0: not rendered
    assert "--shutdown-timeout" not in engine_command(lock, shutdown_timeout_s=30).argv
    newer = lock.model_copy(
        update={
            "engine": lock.engine.model_copy(
                update={"version": lock.engine.version.model_copy(update={"value": "0.32.0"})}
            )
        }
    )
    argv = engine_command(newer, shutdown_timeout_s=30).argv
    assert argv[argv.index("--shutdown-timeout") + 1] == "30"


def test_declared_flag_that_disagrees_with_the_lock_is_refused(write_plan: Any) -> None:
    path: Path = write_plan(
        {"engine": {"name": "vllm", "version": "0.11.0", "flags": ["--max-model-len=8192"]}}
    )
    with pytest.raises(ConfigError, match=r"lock\.engine\.flags: --max-model-len=8192 disagrees"):
        engine_command(load_plan(path).lock)


def test_declared_extra_flag_is_passed_through(write_plan: Any) -> None:
    path = write_plan(
        {"engine": {"name": "vllm", "flags": ["--enable-chunked-prefill", "--seed", "7"]}}
    )
    argv = engine_command(load_plan(path).lock).argv
    assert argv[-3:] == ("--enable-chunked-prefill", "--seed", "7")


def test_offload_becomes_vllm_kv_offloading_size_in_gib(write_plan: Any) -> None:
    tier = {"name": "cpu", "capacity_bytes": 64 * 1024**3, "bandwidth_bytes_per_s": 2.0e10}
    path = write_plan(
        {"offload": "cpu:64GiB"},
        target={"kind": "sim", "timing_model": "roofline", "kv_tiers": [tier]},
    )
    argv = list(engine_command(load_plan(path).lock).argv)
    i = argv.index("--kv-offloading-size")
    assert argv[i : i + 4] == ["--kv-offloading-size", "64", "--kv-offloading-backend", "native"]


def test_sglang_flag_names(write_plan: Any) -> None:
    path = write_plan({"engine": {"name": "sglang", "version": "0.5.4"}, "tensor_parallel": 2})
    assert list(engine_command(load_plan(path).lock).argv) == [
        "python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B",
        "--host", "0.0.0.0", "--port", "8000", "--enable-metrics",
        "--tp-size", "2", "--pp-size", "1", "--context-length", "16384", "--page-size", "16",
        "--mem-fraction-static", "0.9", "--kv-cache-dtype", "auto",
        "--max-running-requests", "256", "--chunked-prefill-size", "8192",
    ]  # fmt: skip


def test_llamacpp_context_is_split_over_slots(write_plan: Any) -> None:
    path = write_plan(
        {
            "engine": {"name": "llama.cpp"},
            "max_num_seqs": 4,
            "max_model_len": 4096,
            "kv_dtype": "q8_0",
        }
    )
    # reference/llamacpp.md §3: -c is divided by -np, so 4 slots of 4096 need -c 16384
    assert list(engine_command(load_plan(path).lock, model_path="/models/m.gguf").argv) == [
        "llama-server", "-m", "/models/m.gguf", "--host", "0.0.0.0", "--port", "8000",
        "--metrics", "--parallel", "4", "--ctx-size", "16384",
        "--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
    ]  # fmt: skip


def test_unknown_engine_is_one_line_error(write_plan: Any) -> None:
    path = write_plan({"engine": {"name": "tgi"}})
    with pytest.raises(ConfigError, match=r"lock\.engine\.name: kvbudget deploy renders vllm"):
        engine_command(load_plan(path).lock)
