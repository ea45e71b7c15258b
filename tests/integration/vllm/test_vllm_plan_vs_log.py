"""`kvbudget plan --engine vllm --engine-version 0.32.0` against vLLM 0.32.0's own pool (CPU build).

The oracle is the engine: its start-up log (``CPU KV cache size: N tokens``, ``Maximum
concurrency for L tokens per request: Xx``, ``Overriding num_gpu_blocks=A with
num_gpu_blocks_override=B``) and ``vllm:cache_config_info`` ``num_gpu_blocks``. ``plan`` must
reproduce them exactly for: dense GQA (the suite's default server), and, in one more start, MQA
with fp8 KV, a non-default block size (64) and ``--num-gpu-blocks-override`` (the log's
pre-override block count checks the pool without the override). The pool memory is the
engine's ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB), given to plan as ``--kv-cache-memory 1GiB``.
The wider per-architecture oracle (sliding, hybrids, MLA, Mamba, ...) is issue 14's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# an engine start takes 30-90 s (minutes on a busy machine): generous per-test limits
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

OVERRIDE_BLOCKS = 100


def plan(config: Path, *args: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "kvbudget",
        "plan",
        "--model",
        str(config),
        "--engine",
        "vllm",
        "--engine-version",
        "0.32.0",
        "--gpu",
        "H100",
        "--kv-cache-memory",
        "1GiB",
        "--no-scenarios",
        "--json",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


@pytest.fixture(scope="module")
def mqa_fp8_server(
    vllm: Any, vllm_launcher: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("vllm-mqa") / "vllm.log"
    args = ["--kv-cache-dtype", "fp8", "--block-size", "64"]
    args += ["--num-gpu-blocks-override", str(OVERRIDE_BLOCKS)]
    with vllm_launcher.start_server(
        vllm, vllm.model("mqa"), log, args, max_model_len=2048
    ) as server:
        yield server


def test_dense_gqa_pool_equals_vllm_log(vllm_server: Any) -> None:
    server = vllm_server
    log = server.kv_log()
    assert log is not None, server.log_path
    got = plan(server.model / "config.json", "--block-size", "128", "--max-model-len", "4096")
    assert got["kv_cache_tokens"] == log.kv_cache_size_tokens  # 1,048,576 observed
    assert f"{got['max_concurrency']:.2f}" == log.max_concurrency_x
    labels = server.metrics_text()
    assert f'num_gpu_blocks="{got["num_blocks"]}"' in labels


def test_mqa_fp8_block64_override_pool_equals_vllm_log(mqa_fp8_server: Any) -> None:
    server = mqa_fp8_server
    log = server.kv_log()
    assert log is not None, server.log_path
    config = server.model / "config.json"
    common = ["--kv-dtype", "fp8", "--block-size", "64", "--max-model-len", "2048"]
    # without the override: the pool vLLM computed before replacing it (65,536 observed)
    free = plan(config, *common)
    assert free["num_blocks"] == log.num_gpu_blocks_before_override
    # with it: the pool vLLM runs
    got = plan(config, *common, "--num-gpu-blocks-override", str(OVERRIDE_BLOCKS))
    assert got["num_blocks"] == OVERRIDE_BLOCKS
    assert got["kv_cache_tokens"] == log.kv_cache_size_tokens  # 6,400 observed
    assert f"{got['max_concurrency']:.2f}" == log.max_concurrency_x  # 3.12 observed
    assert log.max_concurrency_len == 2048
    text = server.metrics_text()
    assert f'num_gpu_blocks="{OVERRIDE_BLOCKS}"' in text and 'block_size="64"' in text
    assert 'cache_dtype="fp8"' in text
