"""SGLang's plan of one replica (reference §7): ``mem_fraction_static`` -> rest memory ->
``max_total_num_tokens`` (``capacity.sglang_pool``), min over pipeline stages."""

from __future__ import annotations

from dataclasses import replace

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.engines.sglang import dsv4 as v4
from kvbudget.capacity.engines.sglang.dots3 import make_dots3_sglang_plan
from kvbudget.capacity.engines.sglang.inkling import inkling_plan
from kvbudget.capacity.engines.sglang.mamba import layers_in, mamba_setup
from kvbudget.capacity.engines.sglang.speculative import dsa_latent_cell, sglang_draft
from kvbudget.capacity.layouts.base import refuse_indexer
from kvbudget.capacity.layouts.grouping import group_by_kind
from kvbudget.capacity.layouts.sglang import (
    DSA_PAGE_SIZE,
    MINIMAX_M3_PAGE_SIZE,
    is_sglang_dsa,
    is_sglang_minimax_m3,
    minimax_m3_k_only_layers,
    refuse_unmodelled_sglang,
    sglang_cell_bytes,
    sglang_dsa_cell_bytes,
    sglang_dsa_dtype,
    sglang_dsa_raw_fp8,
    sglang_minimax_m3_cell_bytes,
    sglang_minimax_m3_dtype,
)
from kvbudget.capacity.layouts.sglang_dots3 import is_sglang_dots3
from kvbudget.capacity.layouts.sglang_dsv4 import is_sglang_dsv4
from kvbudget.capacity.layouts.vllm import get_pp_indices, vllm_layer_specs
from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.memory import (
    CUDA_CONTEXT_BYTES,
    MemoryTerm,
    RankMemory,
    estimate_non_torch_bytes,
    flag_term,
)
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.pool import KvCacheGroup
from kvbudget.capacity.sglang_pool import (
    SglangPool,
    kv_allocated_line,
    mamba_state_pool,
    max_running_requests,
    max_total_num_tokens,
    rest_memory_bytes,
    sglang_defaults,
    split_hybrid_swa,
)
from kvbudget.capacity.versions import DEFAULT_SGLANG_VERSION, parse_version
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layers import MLA, FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.units import MiB

#: models for which SGLang turns the hybrid SWA pool off (``disable_hybrid_swa_memory``, §7.1)
NO_HYBRID_SWA_MODEL_TYPES = frozenset({"gpt_oss", "gemma2", "gemma3", "gemma3_text", "olmo2"})


def make_sglang_plan(
    request: PlanRequest, model: ModelSpec, gpu: GpuSpec, weights: WeightsEstimate, context_len: int
) -> PlanResult:
    """SGLang's token pool for one replica: ``page_size``-token pages, min over PP ranks."""
    if is_sglang_dots3(model):  # SWAKVPool: DSA full layers + an MLA sliding pool (dots3.py)
        return make_dots3_sglang_plan(request, model, gpu, weights, context_len)
    version_text = request.engine_version or DEFAULT_SGLANG_VERSION
    version = parse_version(version_text)
    defaults: dict[str, str] = {}
    notes: list[str] = []
    if request.engine_version is None:
        defaults["engine_version"] = f"{DEFAULT_SGLANG_VERSION} (kvbudget default)"
    rule = sglang_defaults(
        version, gpu_memory_mib=gpu.memory_bytes / MiB, tp=request.tp, pp=request.pp
    )
    frac = request.mem_fraction_static or rule.mem_fraction_static
    if request.mem_fraction_static is None:
        defaults["mem_fraction_static"] = f"{frac} ({rule.rule})"
    page_size = request.page_size or 1
    kv_dtype = get_kv_dtype(request.kv_dtype, engine="sglang", model_dtype=model.torch_dtype)
    msa = is_sglang_minimax_m3(model)  # MiniMax-M3: SGLang's MiniMaxSparseKVPool (layouts/sglang)
    indexed = any(
        isinstance(x, FullAttention) and x.index_head_dim for x in model.layer_seq.distinct()
    )
    if indexed and not msa:
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
    if draft is not None:
        weights = draft.weights(weights)
        notes.extend(draft.notes)
        raised = draft.mem_fraction(rule.reserved_mib, gpu.memory_bytes / MiB)  # 0.5.4's reserve
        if raised is not None and request.mem_fraction_static is None:
            frac = raised
            defaults["mem_fraction_static"] = (
                f"{frac} ({rule.rule}, + {draft.reserve_mib} MiB draft)"
            )
    legacy = draft is not None and draft.legacy  # 0.5.4: the draft outside the rest
    if inkling is not None:
        page_size = inkling.page_size
    specs = (
        []
        if msa or dsv4 or inkling  # cells from SGLang's own rules (_msa_cell, dsv4.py, inkling.py)
        else [
            (s, indices)
            for s, indices in vllm_layer_specs(
                model, kv_dtype=request.kv_dtype, tp=request.tp, pp=1, block_size=1
            ).runs()
            if s.holds_cache
        ]
    )  # one entry per run of layers (two for a parallel hybrid run), never per layer
    # one token of each attention layer: vLLM's hybrid rule raises the attention block of mamba
    # models (one page = many tokens); SGLang's token pool has no such rule, so undo it
    attn = [(s.with_block_size(1), r) for s, r in specs if s.holds_tokens]
    mamba = inkling.mamba if inkling else mamba_setup(request, model, version, version_text)
    notes.extend(mamba.notes)
    padded, state_per_req, mamba_ratio = mamba.padded, mamba.state_per_req, mamba.ratio
    mamba_size: int | None = None
    sliding = [(s, r) for s, r in attn if s.windowed]
    ratio = inkling.ratio if inkling else request.swa_full_tokens_ratio
    if sliding and ratio is not None and model.model_type in NO_HYBRID_SWA_MODEL_TYPES:
        raise ConfigError(
            f"swa_full_tokens_ratio: SGLang sets disable_hybrid_swa_memory for model_type "
            f"{model.model_type} (reference §7.1), so {ratio} would be ignored and sliding layers "
            "count as full; drop --swa-full-tokens-ratio",
            field="swa_full_tokens_ratio",
        )
    if sliding and ratio is None:
        notes.append(
            "sliding/chunked layers counted as full (models with disable_hybrid_swa_memory, e.g. "
            "gpt-oss); pass --swa-full-tokens-ratio to model SGLang's hybrid SWA pool"
        )
    mla = any(s.kind == "mla" for s, _ in attn)
    total_free = gpu.memory_bytes - CUDA_CONTEXT_BYTES
    notes.append(
        "free memory before weights taken as device memory minus 512 MiB CUDA context (estimate)"
    )
    pool_tokens: list[int] = []
    state_pool_bytes: list[int] = []  # the mamba state pool of each rank (0 without one)
    ranks: list[RankMemory] = []
    cell_max = 0
    draft_max = 0  # the draft's share of cell_max (its own pool logs its own line)
    rest_min = 0
    replica_per_token = 0
    for p in range(request.pp):
        start, end = get_pp_indices(model.num_layers, p, request.pp)
        cell = (
            _dsa_cell(model, start, end, kv_dtype, raw_fp8)
            if dsa
            else v4.rank_cell_bytes(model, start, end, dsv4)
            if dsv4
            else _msa_cell(model, start, end, kv_dtype, request.tp)
            if msa
            else inkling.cell(start, end)
            if inkling
            else sum(s.page_size_bytes * layers_in(r, start, end) for s, r in attn)
        )
        draft_cell = 0
        if draft is not None and draft.num_layers:  # the draft's layers priced into the cell
            latent = dsa_latent_cell(model, kv_dtype) if draft.dsa else 0
            draft_cell = draft.cell_bytes(cell, end - start, latent)
            draft_max = max(draft_max, draft_cell)
            cell += draft_cell
        cell_max = max(cell_max, cell)
        replica_per_token += cell * request.tp
        w = weights.per_rank_bytes[p]
        other = (
            flag_term("non_torch", request.non_torch_bytes, "--non-torch-bytes")
            if request.non_torch_bytes is not None
            else estimate_non_torch_bytes(tp=request.tp, pp=request.pp)
        )
        rest = (
            request.kv_cache_memory_bytes
            if request.kv_cache_memory_bytes is not None
            else rest_memory_bytes(
                total_free_bytes=total_free,
                weights_bytes=w - (draft.weights_bytes if draft is not None and legacy else 0),
                other_bytes=other.num_bytes,
                mem_fraction_static=frac,
            )
        )
        token_rest = rest
        state_bytes = 0
        if state_per_req and mamba_ratio is not None:
            # the same stage_per_req on every rank (kv_cache_configurator.py lines 3234-3258)
            size, state_bytes, token_rest = mamba_state_pool(
                rest, state_per_req, mamba_ratio, padding_slot=padded
            )
            mamba_size = size if mamba_size is None else min(mamba_size, size)
        if dsv4 is not None:  # its c128 compressor-state rings: fixed bytes taken first
            state_bytes = v4.rank_fixed_bytes(model, start, end, dsv4)
        state_pool_bytes.append(state_bytes)
        tokens = (
            inkling.max_tokens(token_rest, start, end, request.max_total_tokens)
            if inkling
            else draft.legacy_tokens(
                token_rest, cell - draft_cell, page_size, request.max_total_tokens
            )
            if draft is not None and legacy
            else max_total_num_tokens(
                token_rest, cell, page_size=page_size, max_total_tokens=request.max_total_tokens
            )
        )
        if dsv4 is not None:
            tokens = v4.rank_tokens(model, start, end, token_rest, dsv4, request.max_total_tokens)
        pool_tokens.append(tokens)
        rest_min = rest if p == 0 else min(rest_min, rest)
        inside = "not a separate term in SGLang: it lives in the (1 - mem_fraction_static) share"
        zero = MemoryTerm("activation", 0, "computed", inside)
        ranks.append(
            RankMemory(
                pp_rank=p,
                total_bytes=gpu.memory_bytes,
                gpu_memory_utilization=frac,
                requested_bytes=int(total_free * frac),
                weights=MemoryTerm("weights", w, weights.source, weights.method),
                activation=zero,
                non_torch=other,
                cudagraph=MemoryTerm("cudagraph", 0, "computed", inside),
                cudagraph_subtracted=False,
                kv_cache_memory_override=request.kv_cache_memory_bytes is not None,
                available_kv_bytes=rest,
                num_layers=end - start,
                group_size=1,
                num_blocks=tokens // page_size,
                kv_pool_bytes=tokens * cell,
            )
        )
    tokens = min(pool_tokens)  # PP: all-reduced MIN over ranks
    full_tokens: int | None = None
    swa_tokens: int | None = None
    swa_error: str | None = None
    if inkling:
        full_tokens, swa_tokens = inkling.split(tokens)
        swa_error = inkling.swa_error(swa_tokens)
        notes.append(
            f"hybrid SWA pool (ratio {ratio}): {full_tokens} full-attention tokens, {swa_tokens} "
            "sliding-window tokens; the full pool bounds the context"
        )
    elif sliding and ratio is not None:
        full_layers = [(s, r) for s, r in attn if not s.windowed]
        full_tokens, swa_tokens = split_hybrid_swa(
            tokens,
            full_bytes=full_layers[0][0].page_size_bytes if full_layers else 0,
            swa_bytes=sliding[0][0].page_size_bytes,
            num_full=sum(len(r) for _, r in full_layers),
            num_swa=sum(len(r) for _, r in sliding),
            ratio=ratio,
        )
        notes.append(
            f"hybrid SWA pool (ratio {ratio}): {full_tokens} full-attention tokens, {swa_tokens} "
            "sliding-window tokens; the full pool bounds the context"
        )
    end0 = get_pp_indices(model.num_layers, 0, request.pp)[1]
    dsv4_pool = v4.rank_pool(model, 0, end0, tokens, dsv4) if dsv4 else None
    if dsv4_pool is not None:
        full_tokens, swa_tokens, ratio = (
            dsv4_pool.full_tokens,
            dsv4_pool.swa_tokens,
            dsv4_pool.ratio,
        )
    capacity = full_tokens if full_tokens is not None else tokens
    ranks = [
        replace(
            r,
            kv_pool_bytes=state
            + (
                inkling.pool_bytes(r.pp_rank, tokens, swa_tokens or 0)
                if inkling
                else tokens * (r.kv_pool_bytes // t if t else 0)
            ),
        )
        for r, t, state in zip(ranks, pool_tokens, state_pool_bytes, strict=True)
    ]  # the engine pool: the token pool plus the mamba state pool beside it
    max_running = request.max_num_seqs or max_running_requests(capacity, context_len)
    if request.max_num_seqs is None:
        defaults["max_running_requests"] = (
            f"{max_running} (min(max(tokens/context_len*512, 2048), 4096))"
        )
    if dsv4 is not None:  # 256 unless given, then at most half the pool (dsv4.py)
        max_running = v4.max_running(dsv4, capacity, defaults)
    if request.max_num_seqs is None and draft is not None and draft.max_running:
        max_running = min(draft.max_running, capacity // 2)  # 0.5.23: min(48, tokens // 2)
        defaults["max_running_requests"] = f"{max_running} (SGLang's default with a drafter)"
    if mamba_size is not None:
        cap = mamba_size // mamba.slots
        if cap < max_running:
            max_running = cap
            defaults["max_running_requests"] = (
                f"{cap} (max_mamba_cache_size {mamba_size} // {mamba.slots} state "
                "slots per request)"
            )
        notes.append(
            mamba.slots_note
            or f"{mamba.slots} state slots per running request: radix cache on, no "
            "extra buffer (0.5.23 kv_cache_configurator.py lines 227, 3062-3086, 3135-3150); "
            "--mamba-radix-cache-strategy extra_buffer takes more"
        )
    k_per_token = (
        cell_max - draft_max
        if mla
        else _msa_cell(model, 0, end0, kv_dtype, request.tp, main_only=True) // 2
        if msa
        else inkling.cells(0, end0)[0] // 2
        if inkling
        else sum(s.page_size_bytes // 2 * layers_in(r, 0, end0) for s, r in attn)
    )  # MiniMax-M3: the main pool's K and V (its indexer pool is not in this line)
    line = kv_allocated_line(tokens, k_per_token, k_per_token, mla)
    if dsv4_pool is not None:  # its own log line and too-small sliding pool (dsv4.py)
        line, swa_error = dsv4_pool.log_line(), dsv4_pool.error()
    fits = (
        rest_min > 0
        and capacity >= context_len
        and swa_error is None
        and (mamba_size is None or (mamba_size > 0 and max_running > 0))
    )
    error = None
    if rest_min <= 0:
        error = f"Not enough memory. Please try to increase --mem-fraction-static. Current value: {frac}"
    elif mamba_size is not None and mamba_size <= 0:
        error = (
            "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
            f"max_mamba_cache_size={mamba_size}"
        )
    elif mamba_size is not None and max_running <= 0:
        error = (
            "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={mamba_size}"
        )
    elif swa_error is not None:
        error = swa_error
    elif capacity < context_len:
        error = (
            f"(kvbudget check, not an SGLang message) one request of context_len {context_len} tokens "
            f"needs more than the pool's {capacity} tokens; lower --context-length or raise --mem-fraction-static"
        )
    own_cells = msa or dsv4 or inkling  # one group over every layer, SGLang's own cell
    indices = LayerIndices([range(model.num_layers)] if own_cells else (r for _, r in attn))
    cell = cell_max if dsa or own_cells else max((s.page_size_bytes for s, _ in attn), default=0)
    group = KvCacheGroup(
        0,
        VllmLayerSpec(
            indices[0] if indices else -1, "mla" if mla else "full", page_size, cell * page_size
        ),
        indices,
    )
    sg = SglangPool(
        mem_fraction_static=frac,
        mem_fraction_rule=rule.rule,
        cell_size_bytes=cell_max,
        rest_memory_bytes=rest_min,
        max_total_num_tokens=tokens,
        page_size=page_size,
        max_running_requests=max_running,
        context_len=context_len,
        chunked_prefill_size=request.max_num_batched_tokens or rule.chunked_prefill_size,
        log_line=line,
        swa_full_tokens_ratio=ratio if sliding or dsv4 or inkling else None,
        full_tokens=full_tokens,
        swa_tokens=swa_tokens,
        mamba_full_memory_ratio=mamba_ratio,
        mamba_state_bytes_per_request=state_per_req or None,
        max_mamba_cache_size=mamba_size,
        mamba_pool_bytes=None if mamba_size is None else max(state_pool_bytes),
    )
    return PlanResult(
        model_id=model.model_id,
        engine="sglang",
        engine_version=version_text,
        gpu=gpu,
        tp=request.tp,
        pp=request.pp,
        kv_dtype=kv_dtype.name,
        max_model_len=context_len,
        max_num_batched_tokens=sg.chunked_prefill_size,
        max_num_seqs=max_running,
        block_size=page_size,
        groups=(group,),
        group_size=len(group.layer_indices),
        num_padding_layers=0,
        page_size_bytes=group.page_size_bytes,
        num_blocks=tokens // page_size,
        num_usable_blocks=tokens // page_size,
        kv_cache_tokens=capacity,
        max_concurrency=capacity / context_len,
        available_kv_bytes=rest_min,
        fits=fits,
        needed_bytes=context_len * cell_max,
        estimated_max_model_len=None if fits else max(0, capacity),
        error=error,
        log_lines=(line,),
        kv_bytes_per_token_per_rank=cell_max,
        kv_bytes_per_token_replica=replica_per_token,
        weights=weights,
        ranks=tuple(ranks),
        sglang=sg,
        notes=tuple(notes) + weights.notes,
        headroom_fraction=request.headroom_fraction,
        defaults_applied=defaults,
    )


def _dsa_cell(model: ModelSpec, start: int, end: int, kv_dtype: KvDtype, raw_fp8: bool) -> int:
    """Bytes per token of layers ``[start, end)`` in SGLang's ``DSATokenToKVPool``."""
    return sum(
        members.total(
            lambda x: (
                sglang_dsa_cell_bytes(x, kv_dtype, raw_fp8=raw_fp8) if isinstance(x, MLA) else 0
            )
        )
        for _key, members in group_by_kind(model.layers[start:end])
    )


def _msa_cell(
    model: ModelSpec, start: int, end: int, kv_dtype: KvDtype, tp: int, *, main_only: bool = False
) -> int:
    """Bytes per token of layers ``[start, end)`` in SGLang's ``MiniMaxSparseKVPool`` (the main
    pool alone with ``main_only``); the indexer is in the model dtype
    (``get_minimax_sparse_index_dtype``, 16-bit caches only: ``sglang_minimax_m3_dtype``)."""
    index_bytes = 2 if model.dtype_bytes in (None, 4) else int(model.dtype_bytes or 2)
    k_only = minimax_m3_k_only_layers(model)
    return sum(
        members.total(
            lambda x: (
                (
                    sglang_cell_bytes(x, kv_dtype, tp)
                    if main_only
                    else sglang_minimax_m3_cell_bytes(x, kv_dtype, tp, index_bytes, k_only)
                )
                if isinstance(x, FullAttention)
                else 0
            )
        )
        for _key, members in group_by_kind(model.layers[start:end])
    )
