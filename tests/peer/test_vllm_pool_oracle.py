"""The ``vllm`` oracle: ``plan --engine vllm --engine-version 0.32.0`` against vLLM's own log.

``fixtures/vllm_pools_0.32.0.json`` was recorded by ``scripts/record_vllm_pools.py`` from vLLM
0.32.0's CPU engine (``load_format=dummy``, ``VLLM_CPU_KVCACHE_SPACE=1``): for each tiny config
(built from transformers' own config classes) it holds the logged ``CPU KV cache size`` tokens,
``Maximum concurrency``, the ``kv cache group sizes`` and the engine's final ``num_gpu_blocks``.
Those are measured numbers from an independent implementation; the plan must equal them exactly.

Inputs the plan takes from the recording are the ones a user passes to vLLM (block size, KV
dtype, override, max_model_len, KV memory) plus two values vLLM's CPU platform decides for itself
and logs: the SSM state dtype (``Reset SSM cache type to float32``, ``platforms/cpu.py``) and the
mamba cache mode (``align`` when prefix caching is on, ``models/config.py``). The CPU default
block size is 128 (``platforms/cpu.py``: ``cache_config.block_size = 128`` unless given).

Every case vLLM's CPU engine started must match exactly: there is no list of exempted cases.
Cases vLLM's CPU engine refused are kept with their error and listed in docs/architectures.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_pools_0.32.0.json"
DATA: dict[str, Any] = json.loads(FIXTURE.read_text("utf-8"))
CPU_DEFAULT_BLOCK_SIZE = 128

RECORDED = sorted(name for name, rec in DATA["cases"].items() if "engine_final" in rec)
REFUSED = sorted(name for name, rec in DATA["cases"].items() if "engine_final" not in rec)

#: cases vLLM 0.32.0's CPU engine refuses: (words of its root-cause error, why, from vLLM's source)
ENGINE_REFUSED: dict[str, tuple[str, str]] = {
    "nemotron_h": (
        "is_act_and_mul=False is supported only for CUDA, XPU and ROCm",
        "the default Nemotron-H (Nemotron-3 Nano) has non-gated relu2 MoE layers; vLLM CPU's "
        "fused MoE refuses them (vllm/model_executor/layers/fused_moe/config.py, "
        "FusedMoEConfig.__post_init__). The dense Nemotron-H layout starts (nemotron_h_dense)",
    ),
    "olmo_hybrid": (
        "module 'triton' has no attribute 'set_allocator'",
        "its gated delta net layer (vllm/model_executor/layers/mamba/gdn/"
        "olmo_gdn_linear_attn.py) sets a Triton allocator at init "
        "(vllm/triton_utils/allocation.py); the CPU build's Triton has no CPU backend",
    ),
    "qwen3_5_text": (
        "1 validation error for ModelConfig",
        "vLLM cannot inspect Qwen3_5ForCausalLM: its module imports torchvision "
        "(ModuleNotFoundError: No module named 'torchvision' in the registry's log), which the "
        "CPU venv does not install",
    ),
}


def plan_for(name: str, tmp_path: Path) -> Any:
    rec = DATA["cases"][name]
    final = rec["engine_final"]
    engine = rec["engine_args"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(rec["config"]), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, f"{name}: {resolved.reason}"
    has_state = any(layer.kind in ("state", "hybrid") for layer in resolved.spec.layers)
    request = PlanRequest(
        model=str(path),
        engine="vllm",
        engine_version=DATA["vllm_version"],
        gpu_memory_bytes=64 * GiB,
        kv_cache_memory_bytes=int(rec["kv_cache_space_gib"] * GiB),
        weights_bytes=0,
        max_model_len=final["max_model_len"],
        max_num_batched_tokens=final.get("max_num_batched_tokens") or 2048,
        max_num_seqs=final.get("max_num_seqs") or 256,
        block_size=engine.get("block_size", CPU_DEFAULT_BLOCK_SIZE),
        kv_dtype=engine.get("kv_cache_dtype", "auto"),
        num_gpu_blocks_override=engine.get("num_gpu_blocks_override"),
        mamba_cache_mode=final["mamba_cache_mode"] if has_state else "none",
        mamba_ssm_cache_dtype=final["mamba_ssm_cache_dtype"] if has_state else "auto",
    )
    return make_plan(request, resolved.spec)


@pytest.mark.parametrize("name", RECORDED)
def test_plan_matches_vllm_log(name: str, tmp_path: Path) -> None:
    rec = DATA["cases"][name]
    result = plan_for(name, tmp_path)
    got = {
        "kv_cache_tokens": result.kv_cache_tokens,
        "max_concurrency": round(result.max_concurrency, 2),
        "num_gpu_blocks": result.num_blocks,
    }
    want = {
        "kv_cache_tokens": rec["kv_cache_tokens"],
        "max_concurrency": rec["max_concurrency"],
        "num_gpu_blocks": rec["engine_final"]["num_gpu_blocks"],
    }
    if "group_block_sizes" in rec:
        got["group_block_sizes"] = [g.block_size for g in result.groups]
        want["group_block_sizes"] = rec["group_block_sizes"]
    assert got == want, f"{name}: plan {got} != vLLM {want}"


def test_fixture_is_vllm_0_32_and_covers_the_required_cases() -> None:
    assert DATA["vllm_version"] == "0.32.0"
    required = {"llama_gqa", "llama_mqa", "llama_fp8", "llama_override", "llama_block32"}
    assert required <= set(RECORDED)
    for name in REFUSED:
        assert DATA["cases"][name]["error"], f"{name}: refused without an error line"


def test_every_engine_refusal_is_explained_by_its_root_cause() -> None:
    """Each refused case names its root cause; an explained case that now starts fails here."""
    assert set(REFUSED) == set(ENGINE_REFUSED)
    for name, (words, _why) in ENGINE_REFUSED.items():
        assert words in DATA["cases"][name]["error"], f"{name}: {DATA['cases'][name]['error']}"
