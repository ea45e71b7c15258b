"""What SGLang resolves before it sizes the pool: the version's defaults (``mem_fraction_static``,
the chunked prefill size), the page size and KV dtype each model family forces, the family's own
pool rules (DSA, MiniMax-M3, DeepSeek-V4, Inkling; the mamba state pool), a speculative drafter,
and the attention layers' specs with the hybrid SWA ratio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.engines.sglang import dsv4 as v4
from kvbudget.capacity.engines.sglang.inkling import InklingPlan, inkling_plan
from kvbudget.capacity.engines.sglang.mamba import MambaSetup, mamba_setup
from kvbudget.capacity.engines.sglang.qwen4 import QWEN4_SGLANG_VERSION, Qwen4Plan, qwen4_plan
from kvbudget.capacity.engines.sglang.speculative import SglangDraft, sglang_draft
from kvbudget.capacity.engines.sglang.swa_ratio import swa_ratio
from kvbudget.capacity.kv_checkpoint import CheckpointKv, sglang_checkpoint_kv
from kvbudget.capacity.layouts.base import refuse_indexer, sglang_pp_split
from kvbudget.capacity.layouts.sglang import (
    DSA_PAGE_SIZE,
    MINIMAX_M3_PAGE_SIZE,
    is_sglang_dsa,
    is_sglang_minimax_m3,
    refuse_unmodelled_sglang,
    sglang_dsa_raw_fp8,
    sglang_minimax_m3_dtype,
)
from kvbudget.capacity.layouts.sglang_dsa import sglang_dsa_dtype
from kvbudget.capacity.layouts.sglang_dsv4 import is_sglang_dsv4
from kvbudget.capacity.layouts.sglang_inkling import is_sglang_inkling
from kvbudget.capacity.layouts.sglang_qwen4 import is_sglang_qwen4
from kvbudget.capacity.layouts.sglang_shared import sglang_pool_layers
from kvbudget.capacity.layouts.vllm import vllm_layer_specs
from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.sglang_pool import (
    HYBRID_SWA_CONFIGURATOR_VERSION,
    SglangDefaults,
    sglang_defaults,
)
from kvbudget.capacity.versions import DEFAULT_SGLANG_VERSION, Version, parse_version
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.layers import MLA, FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.units import MiB

#: an attention layer's spec at one token per page and the layers it covers
AttnRun = tuple[VllmLayerSpec, range]


@dataclass(frozen=True)
class SglangSetup:
    """Everything the pool sizing reads, resolved once (``defaults`` and ``notes`` are appended
    to by the later steps, in order)."""

    request: PlanRequest
    model: ModelSpec
    gpu: GpuSpec
    #: the target's weights (with a 0.5.23 drafter's, loaded before the pool is sized)
    weights: WeightsEstimate
    version_text: str
    version: Version
    rule: SglangDefaults
    mem_fraction_static: float
    page_size: int
    kv_dtype: KvDtype
    defaults: dict[str, str]
    notes: list[str]
    #: MiniMax-M3's MiniMaxSparseKVPool
    msa: bool
    #: DSA's DSATokenToKVPool, and whether its fp8 latent is kept raw (trtllm on SM100)
    dsa: bool
    raw_fp8: bool
    dsv4: v4.Dsv4Setup | None
    inkling: InklingPlan | None
    #: Qwen4-Exp's QSATokenToKVPool beside its GDN state pool (qwen4.py)
    qwen4: Qwen4Plan | None
    draft: SglangDraft | None
    mamba: MambaSetup
    #: the attention layers at one token a page (none for the families with their own cells)
    attn: list[AttnRun]
    sliding: list[AttnRun]
    swa_full_tokens_ratio: float | None

    @property
    def legacy_draft(self) -> bool:
        """0.5.4's drafter: its pool and weights outside the rest."""
        return self.draft is not None and self.draft.legacy

    @property
    def own_cells(self) -> bool:
        """The family's cells come from SGLang's own rule, one group over every layer."""
        return (
            self.msa or self.dsv4 is not None or self.inkling is not None or self.qwen4 is not None
        )

    def pp_indices(self, pp_rank: int) -> tuple[int, int]:
        """``[start, end)`` of stage ``pp_rank``: SGLang's split at this version
        (``layouts.base.sglang_pp_split``)."""
        return sglang_pp_split(self.version)(self.model.num_layers, pp_rank, self.request.pp)

    @property
    def swa_configurator(self) -> bool:
        """0.5.23's ``HybridSWAPoolConfigurator`` sizes this generic hybrid SWA pool
        (``sglang_pool.HYBRID_SWA_CONFIGURATOR_VERSION``); 0.5.4 splits the pool after sizing."""
        return (
            self.version >= HYBRID_SWA_CONFIGURATOR_VERSION
            and bool(self.sliding)
            and self.swa_full_tokens_ratio is not None
            and self.inkling is None
            and self.dsv4 is None
        )

    @property
    def mla(self) -> bool:
        return any(s.kind == "mla" for s, _ in self.attn)


def plain_checkpoint_kv(model: ModelSpec, kv_dtype: str, version: Version) -> CheckpointKv | None:
    """SGLang's ``auto`` KV dtype on a KV-quantized ModelOpt checkpoint (``capacity.kv_checkpoint``)
    for the models whose KV dtype kvbudget takes from ``--kv-cache-dtype``; the DSA, DeepSeek-V4,
    MiniMax-M3 and Inkling pools keep their own ``auto`` rules (checkpoint not consulted)."""
    own_rule = (
        is_sglang_dsa(model)
        or is_sglang_dsv4(model)
        or is_sglang_minimax_m3(model)
        or is_sglang_inkling(model)
    )
    return None if own_rule else sglang_checkpoint_kv(model, kv_dtype, version)


class GraphReserveInputs(TypedDict):
    mla: bool
    prefill_graph: bool
    max_running_requests: int | None
    chunked_prefill_size: int | None
    max_total_tokens: int | None


def graph_reserve_inputs(request: PlanRequest, model: ModelSpec) -> GraphReserveInputs:
    """What 0.5.23's default ``mem_fraction_static`` reads besides the GPU, TP and PP
    (``sglang_pool.GRAPH_RESERVE_VERSION``): an MLA model (``use_mla_backend``,
    ``arg_groups/model_override_base.py`` lines 185-189), the prefill CUDA graph (off for
    DeepSeek-V4, ``arg_groups/cuda_graph_hook.py`` lines 192-201), and the flags given."""
    return {
        "mla": any(isinstance(x, MLA) for x in model.layer_seq.distinct()),
        "prefill_graph": not is_sglang_dsv4(model),
        "max_running_requests": request.max_num_seqs,
        "chunked_prefill_size": request.max_num_batched_tokens,
        "max_total_tokens": request.max_total_tokens,
    }


def sglang_setup(
    request: PlanRequest, model: ModelSpec, gpu: GpuSpec, weights: WeightsEstimate
) -> SglangSetup:
    """The settings of one replica, each default said, each refusal in SGLang's words."""
    # Qwen4-Exp: the release kvbudget read its pools in, as Dots3-Note's plan does (qwen4.py)
    default_version = QWEN4_SGLANG_VERSION if is_sglang_qwen4(model) else DEFAULT_SGLANG_VERSION
    version_text = request.engine_version or default_version
    version = parse_version(version_text)
    defaults: dict[str, str] = {}
    notes: list[str] = []
    if request.engine_version is None:
        defaults["engine_version"] = (
            f"{default_version} (the SGLang release kvbudget read Qwen4-Exp's pools in)"
            if default_version != DEFAULT_SGLANG_VERSION
            else f"{DEFAULT_SGLANG_VERSION} (kvbudget default)"
        )
    rule = sglang_defaults(
        version,
        gpu_memory_mib=gpu.memory_bytes / MiB,
        tp=request.tp,
        pp=request.pp,
        **graph_reserve_inputs(request, model),
    )
    frac = request.mem_fraction_static or rule.mem_fraction_static
    if request.mem_fraction_static is None:
        defaults["mem_fraction_static"] = f"{frac} ({rule.rule})"
    page_size = request.page_size or 1
    found = plain_checkpoint_kv(model, request.kv_dtype, version)
    if found is not None and found.name is not None:  # as if --kv-cache-dtype had said it
        request = request.model_copy(update={"kv_dtype": found.name})
        defaults["kv_dtype"] = found.reason
    elif found is not None:
        notes.append(found.reason)
    kv_dtype = get_kv_dtype(request.kv_dtype, engine="sglang", model_dtype=model.torch_dtype)
    msa = is_sglang_minimax_m3(model)  # MiniMax-M3: SGLang's MiniMaxSparseKVPool (layouts/sglang)
    qwen4 = qwen4_plan(request, model, version, defaults, notes)  # None: not Qwen4-Exp
    if qwen4 is not None:  # QSATokenToKVPool: 64-token pages, its own K/V dtype rule
        kv_dtype, page_size = qwen4.geometry.kv_dtype, qwen4.page_size
    indexed = any(
        isinstance(x, FullAttention) and x.index_head_dim for x in model.layer_seq.distinct()
    )
    if indexed and not msa and qwen4 is None:
        refuse_indexer(model, "sglang")  # an indexer beside K/V that kvbudget has not read
    refuse_unmodelled_sglang(model)
    dsa = is_sglang_dsa(model)
    dsv4 = v4.dsv4_setup(request, notes, defaults) if is_sglang_dsv4(model) else None
    if dsv4 is not None:  # DeepSeek-V4's own pools (dsv4.py)
        kv_dtype, page_size = get_kv_dtype(dsv4.kv_dtype, engine="sglang"), dsv4.page_size
    raw_fp8 = dsa and sglang_dsa_raw_fp8(model.model_type, gpu.compute_capability_major or 0)
    if msa:
        kv_dtype = sglang_minimax_m3_dtype(request.kv_dtype, model.torch_dtype)
        if request.page_size is None:
            page_size = MINIMAX_M3_PAGE_SIZE
            defaults["page_size"] = (
                f"{MINIMAX_M3_PAGE_SIZE} (SGLang's MiniMax-M3 default with fa3 on Hopper, fa4 / "
                "trtllm_mha on Blackwell)"
            )
    if dsa:
        # SGLang's DSA overrides (layouts/sglang.py cites the lines): 64-token pages whatever
        # --page-size says; dtype auto by compute capability (10+: Blackwell)
        sm100 = (gpu.compute_capability_major or 0) >= 10
        kv_dtype = sglang_dsa_dtype(request.kv_dtype, model.model_type, sm100=sm100)
        if request.kv_dtype.strip().lower() == "auto":
            defaults["kv_dtype"] = f"{kv_dtype.name} (SGLang's DSA default on this GPU)"
        if request.page_size not in (None, DSA_PAGE_SIZE):
            notes.append(
                f"SGLang sets page_size {DSA_PAGE_SIZE} for DSA models on CUDA; "
                f"--page-size {request.page_size} is overridden"
            )
        page_size = DSA_PAGE_SIZE
    inkling = inkling_plan(request, model, gpu, version, kv_dtype, defaults)  # None: not Inkling
    draft = sglang_draft(  # engines/sglang/speculative.py
        request, model, version, weights, compute_capability_major=gpu.compute_capability_major
    )
    if draft is not None and dsv4 is not None:  # the drafter's rings and inflation (dsv4_spec.py)
        dsv4.draft_tokens = draft.dsv4_draft_tokens
    if draft is not None:
        weights = draft.weights(weights)
        notes.extend(draft.notes)
        raised = draft.mem_fraction(rule.reserved_mib, gpu.memory_bytes / MiB)  # 0.5.4's reserve
        if raised is not None and request.mem_fraction_static is None:
            frac = raised
            defaults["mem_fraction_static"] = (
                f"{frac} ({rule.rule}, + {draft.reserve_mib} MiB draft)"
            )
    if inkling is not None:
        page_size = inkling.page_size
    own = msa or dsv4 is not None or bool(inkling) or qwen4 is not None
    attn = _attention_runs(request, model, own_cells=own)
    mamba = (
        inkling.mamba
        if inkling
        else qwen4.mamba
        if qwen4
        else mamba_setup(request, model, version, version_text)
    )
    notes.extend(mamba.notes)
    sliding = [(s, r) for s, r in attn if s.windowed]
    ratio = inkling.ratio if inkling else request.swa_full_tokens_ratio
    if sliding:  # taken, ignored as SGLang ignores it, or SGLang's default (swa_ratio.py)
        ratio = swa_ratio(model, ratio, version, defaults, notes)
    return SglangSetup(
        request, model, gpu, weights, version_text, version, rule, frac, page_size, kv_dtype,
        defaults, notes, msa, dsa, raw_fp8, dsv4, inkling, qwen4, draft, mamba, attn, sliding,
        ratio,
    )  # fmt: skip


def _attention_runs(request: PlanRequest, model: ModelSpec, *, own_cells: bool) -> list[AttnRun]:
    """The attention layers' specs at one token a page: vLLM's hybrid rule raises the attention
    block of mamba models (one page = many tokens); SGLang's token pool has no such rule, so it
    is undone. None for the families whose cells come from SGLang's own rules."""
    if own_cells:
        return []
    specs = [
        (s, indices)
        for s, indices in vllm_layer_specs(
            sglang_pool_layers(model),  # KV-shared layers hold their own rows in SGLang's pool
            kv_dtype=request.kv_dtype,
            tp=request.tp,
            pp=1,
            block_size=1,
        ).runs()
        if s.holds_cache
    ]  # one entry per run of layers (two for a parallel hybrid run), never per layer
    return [(s.with_block_size(1), r) for s, r in specs if s.holds_tokens]
