"""SGLang's Inkling plan: the hybrid SWA token pool beside the conv-state pool (the arithmetic and
its sources: ``capacity.layouts.sglang_inkling``). The default path only: ``--enable-unified-memory``
(one pool for both, ``mem_cache/kv_cache_configurator.py`` lines 951-961) is not a kvbudget flag.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.engines.sglang.mamba import MambaSetup
from kvbudget.capacity.layouts.base import (
    SGLANG_PP_TAIL_SPLIT_VERSION,
    LayoutNotApplicable,
    sglang_pp_split,
)
from kvbudget.capacity.layouts.sglang_inkling import (
    INKLING_MAMBA_FULL_MEMORY_RATIO,
    INKLING_SM100_PAGE_SIZE,
    INKLING_STATE_SLOTS_PER_REQUEST,
    INKLING_SWA_FULL_TOKENS_RATIO,
    InklingGeometry,
    inkling_geometry,
    inkling_max_total_tokens,
    inkling_split,
    is_sglang_inkling,
)
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.model import ModelSpec

#: the first SGLang release whose Inkling pools kvbudget read (the 0.5.4 wheel has no Inkling)
INKLING_VERSION = (0, 5, 23)

#: SGLang's stage split (Inkling is planned from 0.5.23 only)
_PP_SPLIT = sglang_pp_split(SGLANG_PP_TAIL_SPLIT_VERSION)


@dataclass(frozen=True, slots=True)
class InklingPlan:
    """Inkling's inputs to ``make_sglang_plan``: geometry, ratio, page size, the state pool."""

    geometry: InklingGeometry
    ratio: float
    page_size: int
    mamba: MambaSetup
    kv_dtype: KvDtype
    tp: int
    pp: int
    num_layers: int

    def cells(self, start: int, end: int) -> tuple[int, int]:
        """``(full, sliding)`` bytes per token of layers ``[start, end)`` on one rank."""
        return self.geometry.cell_bytes(self.kv_dtype, self.tp, start, end)

    def cell(self, start: int, end: int) -> int:
        """Bytes per token of every attention layer of ``[start, end)`` at full length."""
        return sum(self.cells(start, end))

    def max_tokens(self, rest_bytes: int, start: int, end: int, cap: int | None) -> int:
        """One rank's ``max_total_num_tokens`` (full tokens): ``int(rest // (F + r x S))``,
        capped by ``--max-total-tokens``, floored to the page."""
        full, swa = self.cells(start, end)
        tokens = inkling_max_total_tokens(rest_bytes, full, swa, self.ratio)
        if cap is not None:
            tokens = min(tokens, cap)
        return tokens // self.page_size * self.page_size

    def split(self, tokens: int) -> tuple[int, int]:
        return inkling_split(tokens, self.ratio, self.page_size)

    def pool_bytes(self, pp_rank: int, full_tokens: int, swa_tokens: int) -> int:
        """The token pools of one PP rank: full tokens x full cell + sliding tokens x sliding."""
        start, end = _PP_SPLIT(self.num_layers, pp_rank, self.pp)
        full, swa = self.cells(start, end)
        return full_tokens * full + swa_tokens * swa

    def swa_error(self, swa_tokens: int) -> str | None:
        """SGLang's ``validate_swa_pool_size`` (``pool_configurator.py`` lines 197-216)."""
        window = self.geometry.sliding_window
        if window + self.page_size >= swa_tokens:
            return (
                f"SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill "
                f"admission floor is sliding_window_size ({window}) + page_size "
                f"({self.page_size}). Increase --swa-full-tokens-ratio or the total KV budget."
            )
        return None


def inkling_plan(
    request: PlanRequest,
    model: ModelSpec,
    gpu: GpuSpec,
    version: tuple[int, int, int],
    kv_dtype: KvDtype,
    defaults: dict[str, str],
) -> InklingPlan | None:
    """Inkling's plan inputs (None for any other model); fills ``defaults``."""
    if not is_sglang_inkling(model):
        return None
    if version < INKLING_VERSION:
        raise LayoutNotApplicable(
            f"{model.model_type}: kvbudget read SGLang's Inkling pools in 0.5.23 (the 0.5.4 wheel "
            "has no Inkling model); plan with --engine-version 0.5.23"
        )
    geometry = inkling_geometry(model)
    ratio = request.swa_full_tokens_ratio
    if ratio is None:
        ratio = INKLING_SWA_FULL_TOKENS_RATIO
        defaults["swa_full_tokens_ratio"] = (
            f"{ratio} (SGLang's Inkling override, arg_groups/model_overrides/inkling.py)"
        )
    sm100 = (gpu.compute_capability_major or 0) >= 10
    page_size = request.page_size or (INKLING_SM100_PAGE_SIZE if sm100 else 1)
    if request.page_size is None and sm100:
        defaults["page_size"] = (
            f"{INKLING_SM100_PAGE_SIZE} (SGLang's fa4 backend for Inkling on SM100)"
        )
    per_req = geometry.state_bytes_per_request(request.tp, model.num_layers)
    if request.pp > 1:  # the largest stage's share (kv_cache_configurator.py lines 3234-3258)
        stage_max = max(
            end - start
            for start, end in (
                _PP_SPLIT(model.num_layers, p, request.pp) for p in range(request.pp)
            )
        )
        per_req = int(per_req * (stage_max / model.num_layers))
    mamba_ratio = INKLING_MAMBA_FULL_MEMORY_RATIO
    notes = [
        f"SGLang Inkling conv-state pool: {per_req} B per request (six bfloat16 conv states per "
        f"layer, configs/inkling.py lines 218-256), given mamba_full_memory_ratio {mamba_ratio} "
        "of the rest (Inkling's override), rest*r/(1+r) before the token pool",
        f"SGLang Inkling hybrid SWA pool: max_total_num_tokens = rest // (full + {ratio} x "
        "sliding bytes per token) full tokens, sliding tokens x ratio (pool_configurator.py "
        "lines 786-916); --enable-unified-memory's single pool is not modelled",
    ]
    slots_note = (
        f"{INKLING_STATE_SLOTS_PER_REQUEST} state slots per running request: Inkling's "
        "extra_buffer radix strategy with the overlap schedule (3 + 2; kv_cache_configurator.py "
        "lines 227, 3062-3088)"
    )
    mamba = MambaSetup(
        True,
        per_req,
        mamba_ratio,
        notes,
        slots=INKLING_STATE_SLOTS_PER_REQUEST,
        slots_note=slots_note,
    )
    return InklingPlan(
        geometry, ratio, page_size, mamba, kv_dtype, request.tp, request.pp, model.num_layers
    )
