"""How many GPUs vLLM 0.32 spreads a MoE layer's routed experts over: the one rule every
vLLM pricer (target weights, MTP drafters) uses.

With ``--data-parallel-size dp`` a MoE layer spans every rank of every data-parallel engine:
``FusedMoEParallelConfig.make`` (vLLM 0.32.0 ``model_executor/layers/fused_moe/config.py`` lines
1108-1200, ``flatten_tp_across_dp_and_pcp``) flattens them to ``tp x dp`` (experts split whole
with ``--enable-expert-parallel``, tensor-sharded otherwise: the same bytes per GPU), while
attention and dense layers stay split over ``tp`` within each engine. SGLang does not share it:
its ``moe_tp_size`` is ``tp_size // moe_ep_size // moe_dp_size`` (sglang 0.5.23
``srt/runtime_context.py`` line 154), its DP attention inside ``--tp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.spec.model import ModelSpec

__all__ = ["vllm_moe_ranks"]


def vllm_moe_ranks(request: PlanRequest, model: ModelSpec) -> int | None:
    """``tp x dp`` where data parallel widens ``model``'s routed experts (module doc); None where
    they follow ``tp`` (one engine, or no experts)."""
    dp = request.data_parallel_size or 1
    return request.tp * dp if dp > 1 and model.num_experts else None
