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
from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.layers import MLA, FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.units import MiB

#: models for which SGLang turns the hybrid SWA pool off (``disable_hybrid_swa_memory``, §7.1;
#: 0.5.4 ``server_args.py`` lines 959, 982, 988)
NO_HYBRID_SWA_MODEL_TYPES = frozenset({"gpt_oss", "gemma2", "gemma3", "gemma3_text", "olmo2"})
#: 0.5.23 no longer turns it off for gpt-oss (``arg_groups/model_overrides/gpt_oss.py`` sets no
#: ``disable_hybrid_swa_memory``; ``GptOssForCausalLM`` is in ``SWA_SINK_ARCHS``,
#: ``configs/model_config.py`` lines 88-90, a hybrid SWA arch, lines 2651-2690); Gemma-2/3 and
#: Olmo2 keep it (``model_overrides/gemma2_gemma3.py`` line 26, ``olmo2.py`` line 23)
NO_HYBRID_SWA_MODEL_TYPES_0523 = NO_HYBRID_SWA_MODEL_TYPES - {"gpt_oss"}

#: SGLang's ``--swa-full-tokens-ratio`` when not given: 0.5.4 ``server_args.py`` line 235
#: (``swa_full_tokens_ratio: float = 0.8``); 0.5.23 ``arg_groups/fields/schedule.py`` lines
#: 150-161 (``fallback=0.8``)
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
#: 0.5.23's hybrid SWA architectures (``configs/model_config.py`` ``is_hybrid_swa_model``, lines
#: 2651-2697, with ``SWA_SINK_ARCHS`` lines 88-96 and ``MIMO_V2_MODEL_ARCHS`` lines 74-77):
#: ``ModelConfig.is_hybrid_swa`` holds for them unless ``disable_hybrid_swa_memory`` (lines
#: 1213-1218), and the pool is ``HybridSWAPoolConfigurator``'s (``pool_configurator.py`` lines
#: 1715-1725). The families with their own pools (DeepSeek-V4, Inkling) are planned apart.
HYBRID_SWA_ARCHS_0523 = frozenset(
    {
        "BeamForCausalLM",
        "Llama4ForConditionalGeneration",
        "GptOssForCausalLM",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "IQuestQ1ForCausalLM",
        "IQuestQ1MTP",
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Step3p5ForCausalLM",
        "Step3p5MTP",
        "Step3p7ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "LagunaForCausalLM",
        "MellumForCausalLM",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "UnlimitedOCRForCausalLM",
    }
)

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
    draft = sglang_draft(request, model, version, weights)  # engines/sglang/speculative.py
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
    _check_swa_ratio(model, sliding, ratio, notes, version)
    if ratio is None and sliding:
        ratio = _default_swa_ratio(model, version, defaults, notes)
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
            model, kv_dtype=request.kv_dtype, tp=request.tp, pp=1, block_size=1
        ).runs()
        if s.holds_cache
    ]  # one entry per run of layers (two for a parallel hybrid run), never per layer
    return [(s.with_block_size(1), r) for s, r in specs if s.holds_tokens]


def _check_swa_ratio(
    model: ModelSpec,
    sliding: list[AttnRun],
    ratio: float | None,
    notes: list[str],
    version: Version,
) -> None:
    """A ratio SGLang would ignore for a model that sets ``disable_hybrid_swa_memory`` is
    refused; one given for a model outside SGLang's hybrid SWA models is applied with a note (the
    split models the pool as if SGLang served it; see :func:`_default_swa_ratio` for which)."""
    off = (
        NO_HYBRID_SWA_MODEL_TYPES_0523
        if version >= HYBRID_SWA_CONFIGURATOR_VERSION
        else NO_HYBRID_SWA_MODEL_TYPES
    )
    if sliding and ratio is not None and model.model_type in off:
        raise ConfigError(
            f"swa_full_tokens_ratio: SGLang sets disable_hybrid_swa_memory for model_type "
            f"{model.model_type} (reference §7.1), so {ratio} would be ignored and sliding layers "
            "count as full; drop --swa-full-tokens-ratio",
            field="swa_full_tokens_ratio",
        )
    if sliding and ratio is not None and not _sglang_hybrid_swa(model, version):
        notes.append(
            f"--swa-full-tokens-ratio {ratio}: SGLang {'.'.join(map(str, version))} does not "
            f"run {model.architecture} with its hybrid SWA pool by default (see "
            "defaults_applied without the flag); the split models the pool as if it did"
        )


def _sglang_hybrid_swa(model: ModelSpec, version: Version) -> bool:
    """SGLang runs this model with its hybrid SWA pool (0.5.23: a listed architecture that does
    not turn it off; 0.5.4: none kvbudget plans, see :func:`_default_swa_ratio`)."""
    return (
        version >= HYBRID_SWA_CONFIGURATOR_VERSION
        and model.architecture in HYBRID_SWA_ARCHS_0523
        and model.model_type not in NO_HYBRID_SWA_MODEL_TYPES_0523
    )


def _default_swa_ratio(
    model: ModelSpec, version: Version, defaults: dict[str, str], notes: list[str]
) -> float | None:
    """SGLang's hybrid SWA pool when ``--swa-full-tokens-ratio`` is not given: ratio 0.8 for the
    models SGLang runs with it, None (sliding layers counted as full) for the rest, said either
    way in ``defaults``.

    0.5.23: the architectures of :data:`HYBRID_SWA_ARCHS_0523` unless the model sets
    ``disable_hybrid_swa_memory`` (:data:`NO_HYBRID_SWA_MODEL_TYPES_0523`). 0.5.4: none of the
    models kvbudget plans; its pool is hybrid only when the model class has
    ``get_attention_sliding_window_size`` (``model_executor/model_runner.py`` lines 392-400,
    921-928; gpt-oss, Gemma-2/3/3n and Olmo2, which all set ``disable_hybrid_swa_memory``,
    ``server_args.py`` lines 959, 982, 988), and Llama-4's chunked pool needs
    ``--hybrid-kvcache-ratio`` (``configs/model_config.py`` lines 156-167, 975-990), which
    kvbudget does not model."""
    off_0523 = NO_HYBRID_SWA_MODEL_TYPES_0523
    if _sglang_hybrid_swa(model, version):
        defaults["swa_full_tokens_ratio"] = (
            f"{DEFAULT_SWA_FULL_TOKENS_RATIO} (SGLang's fallback, arg_groups/fields/schedule.py "
            f"lines 150-161: {model.architecture} runs with SGLang's hybrid SWA pool, "
            "configs/model_config.py lines 2651-2697)"
        )
        return DEFAULT_SWA_FULL_TOKENS_RATIO
    if version >= HYBRID_SWA_CONFIGURATOR_VERSION:
        why = (
            f"SGLang sets disable_hybrid_swa_memory for model_type {model.model_type}"
            if model.model_type in off_0523
            else f"{model.architecture} is not one of SGLang's hybrid SWA architectures "
            "(configs/model_config.py lines 2651-2697)"
        )
    elif model.model_type in NO_HYBRID_SWA_MODEL_TYPES:
        why = (
            f"SGLang sets disable_hybrid_swa_memory for model_type {model.model_type} "
            "(server_args.py lines 959, 982, 988)"
        )
    else:
        why = (
            "SGLang 0.5.4 uses its hybrid SWA pool only for model classes with "
            "get_attention_sliding_window_size, all of which turn it off, and for Llama-4 with "
            "--hybrid-kvcache-ratio (model_runner.py lines 392-400, 921-928)"
        )
    defaults["swa_full_tokens_ratio"] = f"none ({why}): sliding/chunked layers counted as full"
    notes.append(
        f"sliding/chunked layers counted as full: {why}; --swa-full-tokens-ratio models "
        "SGLang's hybrid SWA pool"
    )
    return None
