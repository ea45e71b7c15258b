"""SGLang 0.5.23 caps ``max_running_requests``, given or estimated, at half the token pool; 0.5.4
does not. Worked by hand from the two wheels:

* 0.5.23 ``srt/mem_cache/kv_cache_configurator.py`` ``resolve_max_num_reqs`` lines 3123-3132:
  ``estimated = max(min(int(tokens / context_len * 512), 4096), 2048)``; given:
  ``min(requested, tokens // 2)``, else ``min(estimated, tokens // 2)``;
* 0.5.4 ``srt/model_executor/model_runner.py`` lines 1646-1670: the estimate alone, or the given
  value as it is.

Llama-3.1-8B in bfloat16 on one GPU: 32 layers x 8 KV heads x 128 x (K + V) x 2 bytes = 131,072
bytes a token, one-token pages; ``--kv-cache-memory`` of 3,000 such tokens is SGLang's rest, so
``max_total_num_tokens`` = 3,000 (reference §7: ``rest // cell``). Context 2,048: the estimate is
``int(3000 / 2048 * 512)`` = 750, raised to 2,048; half the pool is 1,500.
"""

from __future__ import annotations

from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan

CELL_BYTES = 32 * 8 * 128 * 2 * 2  # 131,072
TOKENS = 3_000


def _plan(version: str, **extra: object) -> PlanResult:
    return make_plan(
        PlanRequest(
            model="meta-llama/Llama-3.1-8B",
            engine="sglang",
            engine_version=version,
            gpu="H100-SXM",
            kv_cache_memory_bytes=TOKENS * CELL_BYTES,
            max_model_len=2048,
            **extra,
        )
    )


def test_pool_is_the_hand_worked_one() -> None:
    plan = _plan("0.5.23")
    assert plan.sglang is not None
    assert plan.sglang.cell_size_bytes == CELL_BYTES
    assert plan.sglang.max_total_num_tokens == TOKENS


def test_estimate_capped_at_half_the_pool_from_0_5_23() -> None:
    plan = _plan("0.5.23")
    assert plan.max_num_seqs == 1_500  # min(2,048, 3,000 // 2)
    assert plan.defaults_applied["max_running_requests"].startswith("1500 (at most tokens // 2)")


def test_0_5_4_keeps_the_estimate() -> None:
    assert _plan("0.5.4").max_num_seqs == 2_048


def test_given_value_capped_too_from_0_5_23_with_a_note() -> None:
    plan = _plan("0.5.23", max_num_seqs=1_800)
    assert plan.max_num_seqs == 1_500
    assert any("max_running_requests: 1800 capped at 1500" in n for n in plan.notes)
    assert _plan("0.5.23", max_num_seqs=1_000).max_num_seqs == 1_000  # under the cap: kept
    assert _plan("0.5.4", max_num_seqs=1_800).max_num_seqs == 1_800
