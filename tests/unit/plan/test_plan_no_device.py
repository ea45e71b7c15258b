"""``plan --kv-cache-memory`` without ``--gpu`` (issue 15 item 7): the pool needs no device.

vLLM 0.32 reserves exactly ``kv_cache_memory_bytes`` for the KV cache and skips memory profiling
(``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``), then
``num_blocks = available_memory // bytes_per_block`` (``vllm/v1/core/kv_cache_utils.py``,
``get_kv_cache_config_from_groups``), where one block of a single full-attention group is
``num_layers x page`` and ``page = 2 (K and V) x block_size x kv_heads x head_dim x dtype bytes``.

Expected numbers below are that arithmetic by hand for Llama-3.1-8B (32 layers, 8 KV heads,
head_dim 128, bfloat16, block 16): page = 2 x 16 x 8 x 128 x 2 = 65,536 B; block = 32 x 65,536
= 2,097,152 B.
"""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from kvbudget.cli.plan import plan

MODEL = "meta-llama/Llama-3.1-8B"


def _plan(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(plan, ["--model", MODEL, *args])
    return result.exit_code, result.stdout, result.stderr


def test_kv_cache_memory_alone_plans_the_pool_without_a_device() -> None:
    code, out, err = _plan("--kv-cache-memory", "10000000000", "--max-model-len", "8192", "--json")
    assert code == 0, err
    doc = json.loads(out)
    # 10,000,000,000 // 2,097,152 = 4,768 (4,768 x 2,097,152 = 9,999,220,736)
    assert doc["num_blocks"] == 4768
    assert doc["kv_cache_tokens"] == 4768 * 16 == 76288
    assert doc["available_kv_bytes"] == 10_000_000_000
    assert doc["device_given"] is False and doc["gpu"] is None
    # no device: no device-peak budget is invented
    assert doc["budgets"]["device_peak"] == []
    # vLLM runs on a device it can query; without --gpu kvbudget takes the >= 70 GiB defaults of
    # vLLM 0.19.0 EngineArgs.get_batch_defaults (API server: 8192 batched tokens, 1024 sequences)
    # and says which to pass for a smaller GPU (issue 29: 2048 got sliding-window concurrency wrong)
    assert doc["max_num_batched_tokens"] == 8192 and doc["max_num_seqs"] == 1024
    assert "--max-num-batched-tokens 2048" in doc["defaults_applied"]["max_num_batched_tokens"]


def test_tensor_parallel_halves_the_block_per_gpu() -> None:
    # TP 2: 4 KV heads per GPU -> block = 32 x 2 x 16 x 4 x 128 x 2 = 1,048,576 B per GPU
    code, out, err = _plan("--kv-cache-memory", "10000000000", "--tp", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["num_blocks"] == 10_000_000_000 // 1_048_576 == 9536


def test_table_says_the_device_is_not_given_and_the_peak_not_computed() -> None:
    code, out, err = _plan(
        "--kv-cache-memory", "20GiB", "--max-model-len", "8192", "--no-scenarios"
    )
    assert code == 0, err
    assert "not given" in out and "not computed" in out
    # 20 GiB // 2 MiB = 10,240 blocks
    assert "10,240" in out


def _refusal(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget", "plan", "--model", MODEL, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_without_kv_cache_memory_a_device_is_still_required() -> None:
    assert _refusal("--max-model-len", "8192").startswith("ConfigError: gpu: no device given")


def test_sglang_still_needs_the_device() -> None:
    line = _refusal("--engine", "sglang", "--kv-cache-memory", "20GiB")
    assert line.startswith("ConfigError: gpu:") and "--engine sglang" in line and "--gpu" in line


def test_sliding_window_concurrency_uses_the_big_device_batch_default() -> None:
    # issue 29: a sliding group's blocks per request depend on max_num_batched_tokens (vLLM 0.32.0
    # kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request:
    # cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1), so the fallback
    # batch size decides the concurrency. gemma-2-9b: 42 layers alternating sliding (4096) / full,
    # 8 KV heads x 256 head_dim, bfloat16, block 16:
    # page = 2 x 16 x 8 x 256 x 2 = 131,072 B; two groups of 21 layers -> block = 21 x 131,072
    # = 2,752,512 B; 20 GiB = 21,474,836,480 B // 2,752,512 = 7,801 blocks.
    # full group: cdiv(8192, 16) = 512 blocks; sliding at T = 8192: cdiv(min(4095 + 8192, 8192),
    # 16) + 1 = 513 -> 7,801 / (512 + 513) = 7.61x. (With the old 2,048 fallback the sliding
    # group needed cdiv(6143, 16) + 1 = 385 blocks: 7,801 / 897 = 8.70x, the over-count.)
    result = CliRunner().invoke(
        plan,
        [
            *("--model", "google/gemma-2-9b", "--kv-cache-memory", "20GiB"),
            *("--max-model-len", "8192", "--engine-version", "0.32.0", "--json"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["num_blocks"] == 7801
    assert round(doc["max_concurrency"], 2) == 7.61
