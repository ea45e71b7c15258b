"""vLLM 0.32's default mamba cache mode for an attention + Mamba hybrid is ``align`` (issue #34).

vLLM turns prefix caching on by default for generative hybrids (``engine/arg_utils.py`` lines
2991 and 3021-3022, ``config/model.py`` lines 2257-2265) and ``MambaModelConfig`` then sets mode
``align`` (``model_executor/models/config.py`` lines 685-693). The expected numbers are vLLM
0.32.0 CPU's own log for the recorded tiny qwen3_next and granitemoehybrid
(``tests/peer/fixtures/vllm_pools_0.32.0.json``: "Mamba cache mode is set to 'align' ... by
default"); plan is given only what the user passes to vLLM plus the CPU's SSM float32 reset and
block 128, and no ``--mamba-cache-mode``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.units import GiB

FIXTURE = Path(__file__).resolve().parents[2] / "peer" / "fixtures" / "vllm_pools_0.32.0.json"


@pytest.mark.parametrize("name", ["qwen3_next", "granitemoehybrid"])
def test_hybrid_default_mode_is_align_as_vllm_logged(name: str, tmp_path: Path) -> None:
    rec = json.loads(FIXTURE.read_text("utf-8"))["cases"][name]
    assert any("by default when prefix caching is enabled" in x for x in rec["log_lines"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(rec["config"]), encoding="utf-8")
    request = PlanRequest(
        model=str(path),
        engine="vllm",
        engine_version="0.32.0",
        gpu_memory_bytes=64 * GiB,
        kv_cache_memory_bytes=GiB,
        weights_bytes=0,
        max_model_len=4096,
        max_num_batched_tokens=4096,
        max_num_seqs=256,
        block_size=128,
        mamba_ssm_cache_dtype="float32",
    )
    result = make_plan(request)
    assert result.kv_cache_tokens == rec["kv_cache_tokens"]  # 145,115 / 286,720 logged
    assert result.num_blocks == rec["engine_final"]["num_gpu_blocks"]
    assert result.mamba_cache_mode == "align"
    assert "mamba_cache_mode" in result.defaults_applied
    older = make_plan(request.model_copy(update={"engine_version": "0.19.0"}))
    assert older.mamba_cache_mode == "none"  # not re-read for older versions
