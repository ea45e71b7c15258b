"""SGLang's Qwen4-Exp plan: ``QSATokenToKVPool`` sized by ``DefaultPoolConfigurator`` beside the
GDN state pool (the arithmetic and its sources: ``capacity.layouts.sglang_qwen4``).

The default path only: the radix cache on with its ``extra_buffer`` strategy (5 state slots per
running request), no speculative decoding (refused for state-pool models by
``engines/sglang/speculative.py``), ``--qsa-indexer-dtype auto``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.engines.sglang.mamba import MambaSetup
from kvbudget.capacity.layouts.base import LayoutNotApplicable, get_pp_indices
from kvbudget.capacity.layouts.sglang_qwen4 import (
    QWEN4_PAGE_SIZE,
    QWEN4_STATE_SLOTS_PER_REQUEST,
    QWEN4_VLM_CACHE_BYTES,
    SglangQwen4,
    check_qwen4_pp,
    is_sglang_qwen4,
    qwen4_ssm_bytes,
    sglang_qwen4,
)
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.sglang_pool import DEFAULT_MAMBA_FULL_MEMORY_RATIO
from kvbudget.spec.model import ModelSpec
from kvbudget.units import MiB

#: the first SGLang release whose Qwen4-Exp pools kvbudget read (the 0.5.4 wheel has no Qwen4-Exp)
QWEN4_VERSION = (0, 5, 23)
#: the same, as ``--engine-version`` spells it (the default for Qwen4-Exp)
QWEN4_SGLANG_VERSION = "0.5.23"


@dataclass(frozen=True, slots=True)
class Qwen4Plan:
    """Qwen4-Exp's inputs to ``make_sglang_plan``: geometry, the state pool, the reservation."""

    geometry: SglangQwen4
    mamba: MambaSetup
    pp: int
    num_layers: int
    #: taken off the budget before the state pool (the multimodal reservation; 0 with
    #: ``--kv-cache-memory`` or ``language_model_only``)
    reserved_bytes: int

    @property
    def page_size(self) -> int:
        return QWEN4_PAGE_SIZE

    def cell(self, start: int, end: int) -> int:
        return self.geometry.cell(start, end)

    def kv_cell(self, start: int, end: int) -> int:
        return self.geometry.kv_cell(start, end)

    def beside_budget_bytes(self, mamba_size: int, max_running: int) -> int:
        """The largest stage's buffers SGLang allocates after sizing, outside its budget: the
        PLE states of ``mamba_size + 1`` slots and the QSA ring of ``max_running + 1`` rows."""
        return max(
            (mamba_size + 1) * self.geometry.ple_slot_bytes(start, end)
            + (max_running + 1) * self.geometry.ring_row_bytes(start, end)
            for start, end in (get_pp_indices(self.num_layers, p, self.pp) for p in range(self.pp))
        )

    def beside_budget_note(self, mamba_size: int, max_running: int) -> str:
        extra = self.beside_budget_bytes(mamba_size, max_running)
        ple = (
            f"PLE short-conv / n-gram states of {mamba_size + 1} state slots "
            "(mem_cache/ple_state_pool.py lines 73-77, 177-182) and "
            if len(self.geometry.ple_layers)
            else ""
        )
        return (
            f"SGLang allocates {extra / MiB:.1f} MiB more per rank after sizing, outside its "
            f"budget (in the 1 - mem_fraction_static share): {ple}the QSA pending index-key "
            f"ring of {max_running + 1} request rows (mem_cache/qsa_kv_pool.py lines 171-205)"
        )


def qwen4_plan(
    request: PlanRequest,
    model: ModelSpec,
    version: tuple[int, int, int],
    defaults: dict[str, str],
    notes: list[str],
) -> Qwen4Plan | None:
    """Qwen4-Exp's plan inputs (None for any other model); fills ``defaults`` and ``notes``."""
    if not is_sglang_qwen4(model):
        return None
    if version < QWEN4_VERSION:
        raise LayoutNotApplicable(
            f"engine_version: {'.'.join(map(str, version))}: kvbudget read SGLang's Qwen4-Exp "
            "pools in 0.5.23 only (the 0.5.4 wheel has no Qwen4-Exp model); plan with "
            "--engine-version 0.5.23"
        )
    geometry = sglang_qwen4(model, request.kv_dtype, tp=request.tp)
    check_qwen4_pp(geometry, model.num_layers, request.pp)
    if request.page_size not in (None, QWEN4_PAGE_SIZE):
        notes.append(
            f"SGLang sets page_size {QWEN4_PAGE_SIZE} for compressed QSA "
            f"(arg_groups/model_overrides/qwen4_exp.py lines 89-96); --page-size "
            f"{request.page_size} is overridden"
        )
    elif request.page_size is None:
        defaults["page_size"] = f"{QWEN4_PAGE_SIZE} (SGLang's compressed-QSA override)"
    ssm_name, ssm_bytes = qwen4_ssm_bytes(model, request.mamba_ssm_cache_dtype)
    n_gdn = len(geometry.gdn_layers)
    stage_max = max(
        (
            geometry.counts(start, end)[1]
            for start, end in (
                get_pp_indices(model.num_layers, p, request.pp) for p in range(request.pp)
            )
        ),
        default=0,
    )
    # the largest stage's share (kv_cache_configurator.py lines 3234-3258)
    per_req = int(geometry.state_per_request(ssm_bytes) * (stage_max / max(n_gdn, 1)))
    ratio = DEFAULT_MAMBA_FULL_MEMORY_RATIO
    mamba_notes = [
        f"SGLang Qwen4-Exp GDN state pool: {per_req} B per request slot (conv bfloat16, "
        f"temporal {ssm_name}; configs/qwen3_next.py lines 288-313), given "
        f"mamba_full_memory_ratio {ratio} of the rest, rest*r/(1+r) (mem_cache/"
        "kv_cache_configurator.py lines 3350-3409), before the token pool",
        "SGLang Qwen4-Exp token pool: QSA layers' K/V plus the compressed index keys "
        "(indexer_head_dim x 2 // indexer_compress_ratio bytes per token per layer; "
        "model_executor/pool_configurator.py lines 491-558), 64-token pages",
    ]
    slots_note = (
        f"{QWEN4_STATE_SLOTS_PER_REQUEST} state slots per running request: the extra_buffer "
        "radix strategy SGLang picks for 64-token pages with the overlap schedule (arg_groups/"
        "overrides.py lines 453-486; 3 + 2, kv_cache_configurator.py lines 227, 3062-3088)"
    )
    mamba = MambaSetup(
        True,
        per_req,
        ratio,
        mamba_notes,
        slots=QWEN4_STATE_SLOTS_PER_REQUEST,
        slots_note=slots_note,
    )
    reserved = 0
    if geometry.multimodal and request.kv_cache_memory_bytes is None:
        reserved = QWEN4_VLM_CACHE_BYTES
        notes.append(
            "100 MiB reserved out of the KV budget for multimodal buffers "
            "(SGLANG_VLM_CACHE_SIZE_MB; Qwen4ExpForConditionalGeneration without "
            "language_model_only)"
        )
    return Qwen4Plan(geometry, mamba, request.pp, model.num_layers, reserved)
