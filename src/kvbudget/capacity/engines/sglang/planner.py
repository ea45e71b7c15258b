"""SGLang's plan of one replica (reference §7): ``mem_fraction_static`` -> rest memory ->
``max_total_num_tokens`` (``capacity.sglang_pool``), min over pipeline stages.

In the order SGLang starts: the settings (``setup``), each stage's cell, rest and tokens
(``stages``), then here the pool's split (hybrid SWA, Inkling, DeepSeek-V4), the running-request
cap, the log line, the fit check and the plan. Dots3-Note has its own plan (``dots3``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget.capacity.engines.sglang import dsv4 as v4
from kvbudget.capacity.engines.sglang.dots3 import make_dots3_sglang_plan
from kvbudget.capacity.engines.sglang.mamba import layers_in
from kvbudget.capacity.engines.sglang.setup import SglangSetup, sglang_setup
from kvbudget.capacity.engines.sglang.stages import (
    SglangStages,
    msa_cell,
    plan_stages,
    swa_cells,
)
from kvbudget.capacity.layouts.sglang_dots3 import is_sglang_dots3
from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.pool import KvCacheGroup
from kvbudget.capacity.sglang_pool import (
    HALF_POOL_CAP_VERSION,
    SglangPool,
    hybrid_swa_pools,
    kv_allocated_line,
    max_running_requests,
    split_hybrid_swa,
)
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.model import ModelSpec


@dataclass(frozen=True)
class _Split:
    """The token pool split into full-attention and sliding-window tokens (None: one pool)."""

    full_tokens: int | None
    swa_tokens: int | None
    #: SGLang's error when the sliding pool is too small to start, else None
    swa_error: str | None
    swa_full_tokens_ratio: float | None
    dsv4_pool: v4.Dsv4Pool | None


def _split(st: SglangSetup, tokens: int) -> _Split:
    """Inkling's and the generic hybrid SWA split of ``tokens``, or DeepSeek-V4's pools."""
    ratio = st.swa_full_tokens_ratio
    full_tokens: int | None = None
    swa_tokens: int | None = None
    swa_error: str | None = None
    if st.inkling is not None:
        full_tokens, swa_tokens = st.inkling.split(tokens)
        swa_error = st.inkling.swa_error(swa_tokens)
    elif st.swa_configurator and ratio is not None:  # 0.5.23 HybridSWAPoolConfigurator
        all_swa = not any(not s.windowed for s, _ in st.attn)
        full_tokens, swa_tokens = hybrid_swa_pools(tokens, ratio, st.page_size, all_swa=all_swa)
        swa_error = _swa_floor_error(st, swa_tokens)
    elif st.sliding and ratio is not None:  # 0.5.4: the sized pool split after
        full_layers = [(s, r) for s, r in st.attn if not s.windowed]
        full_tokens, swa_tokens = split_hybrid_swa(
            tokens,
            full_bytes=full_layers[0][0].page_size_bytes if full_layers else 0,
            swa_bytes=st.sliding[0][0].page_size_bytes,
            num_full=sum(len(r) for _, r in full_layers),
            num_swa=sum(len(r) for _, r in st.sliding),
            ratio=ratio,
        )
    if full_tokens is not None:
        st.notes.append(
            f"hybrid SWA pool (ratio {ratio}): {full_tokens} full-attention tokens, {swa_tokens} "
            "sliding-window tokens; the full pool bounds the context"
        )
    dsv4_pool = None
    if st.dsv4 is not None:
        end0 = st.pp_indices(0)[1]
        dsv4_pool = v4.rank_pool(st.model, 0, end0, tokens, st.dsv4)
        full_tokens, swa_tokens, ratio = (
            dsv4_pool.full_tokens,
            dsv4_pool.swa_tokens,
            dsv4_pool.ratio,
        )
        swa_error = dsv4_pool.error()  # its too-small sliding pool (dsv4.py)
        if st.dsv4.draft_tokens:
            st.notes.append(
                f"the NextN drafter's own pool: {dsv4_pool.draft_pool_bytes:,} B per GPU (one "
                f"ratio-0 layer, {dsv4_pool.swa_tokens // dsv4_pool.page_size + 1} SWA pages), "
                "inside what the target's inflated bytes_per_full_token reserved"
            )
    return _Split(full_tokens, swa_tokens, swa_error, ratio, dsv4_pool)


def _swa_pool_bytes(st: SglangSetup, pp_rank: int, split: _Split) -> int:
    """0.5.23's hybrid SWA pools of one PP rank: full tokens x full cell + sliding x sliding."""
    start, end = st.pp_indices(pp_rank)
    full, swa = swa_cells(st, start, end)
    return (split.full_tokens or 0) * full + (split.swa_tokens or 0) * swa


def _swa_floor_error(st: SglangSetup, swa_tokens: int) -> str | None:
    """0.5.23 ``validate_swa_pool_size`` (``pool_configurator.py`` lines 197-216, called at line
    884): the sliding pool must hold more than ``sliding_window_size + page_size`` tokens
    (a chunked-attention model has no ``sliding_window``: not checked,
    ``configs/model_config.py`` lines 1961-1966)."""
    window = st.sliding[0][0].sliding_window
    if window is None or window + st.page_size < swa_tokens:
        return None
    return (
        f"SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill admission "
        f"floor is sliding_window_size ({window}) + page_size ({st.page_size}). Increase "
        "--swa-full-tokens-ratio or the total KV budget."
    )


def _max_running(st: SglangSetup, capacity: int, context_len: int, mamba_size: int | None) -> int:
    """``max_running_requests``: given, or SGLang's default (DeepSeek-V4's, a drafter's), at
    most what the mamba state pool serves."""
    request, defaults, mamba = st.request, st.defaults, st.mamba
    max_running = request.max_num_seqs or max_running_requests(capacity, context_len)
    if request.max_num_seqs is None:
        defaults["max_running_requests"] = (
            f"{max_running} (min(max(tokens/context_len*512, 2048), 4096))"
        )
    if st.version >= HALF_POOL_CAP_VERSION and max_running > capacity // 2:
        max_running = capacity // 2  # given or estimated (sglang_pool.HALF_POOL_CAP_VERSION)
        if request.max_num_seqs is None:
            defaults["max_running_requests"] = f"{max_running} (at most tokens // 2)"
        else:
            st.notes.append(
                f"max_running_requests: {request.max_num_seqs} capped at {max_running}, half "
                f"the {capacity}-token pool (SGLang {st.version_text} resolve_max_num_reqs)"
            )
    if st.dsv4 is not None:  # 256 unless given, then at most half the pool (dsv4.py)
        max_running = v4.max_running(st.dsv4, capacity, defaults)
    if request.max_num_seqs is None and st.draft is not None and st.draft.max_running:
        max_running = min(st.draft.max_running, capacity // 2)  # 0.5.23: min(48, tokens // 2)
        defaults["max_running_requests"] = f"{max_running} (SGLang's default with a drafter)"
    if mamba_size is not None:
        cap = mamba_size // mamba.slots
        if cap < max_running:
            max_running = cap
            defaults["max_running_requests"] = (
                f"{cap} (max_mamba_cache_size {mamba_size} // {mamba.slots} state "
                "slots per request)"
            )
        st.notes.append(
            mamba.slots_note
            or f"{mamba.slots} state slots per running request: radix cache on, no "
            "extra buffer (0.5.23 kv_cache_configurator.py lines 227, 3062-3086, 3135-3150); "
            "--mamba-radix-cache-strategy extra_buffer takes more"
        )
    return max_running


def _log_line(st: SglangSetup, stages: SglangStages, tokens: int, split: _Split) -> str:
    """SGLang's ``KV Cache is allocated`` line (K and V per token of the first stage; MLA: the
    latent), or DeepSeek-V4's own pool line."""
    if split.dsv4_pool is not None:
        return split.dsv4_pool.log_line()
    end0 = st.pp_indices(0)[1]
    k_per_token = (
        stages.cell_max - stages.draft_max
        if st.mla
        else msa_cell(st.model, 0, end0, st.kv_dtype, st.request.tp, main_only=True) // 2
        if st.msa
        else st.inkling.cells(0, end0)[0] // 2
        if st.inkling is not None
        else st.qwen4.kv_cell(0, end0) // 2
        if st.qwen4 is not None
        else sum(s.page_size_bytes // 2 * layers_in(r, 0, end0) for s, r in st.attn)
    )  # MiniMax-M3: the main pool's K and V (its indexer pool is not in this line)
    return kv_allocated_line(tokens, k_per_token, k_per_token, st.mla)


def _error(
    st: SglangSetup,
    stages: SglangStages,
    split: _Split,
    capacity: int,
    context_len: int,
    max_running: int,
) -> str | None:
    """SGLang's own start-up error in its words, or kvbudget's one-request check; None: fits."""
    mamba_size = stages.mamba_size
    if stages.rest_min <= 0:
        return (
            "Not enough memory. Please try to increase --mem-fraction-static. Current value: "
            f"{st.mem_fraction_static}"
        )
    if mamba_size is not None and mamba_size <= 0:
        return (
            "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
            f"max_mamba_cache_size={mamba_size}"
        )
    if mamba_size is not None and max_running <= 0:
        return (
            "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={mamba_size}"
        )
    if split.swa_error is not None:
        return split.swa_error
    if capacity < context_len:
        return (
            f"(kvbudget check, not an SGLang message) one request of context_len {context_len} "
            f"tokens needs more than the pool's {capacity} tokens; lower --context-length or "
            "raise --mem-fraction-static"
        )
    return None


def make_sglang_plan(
    request: PlanRequest, model: ModelSpec, gpu: GpuSpec, weights: WeightsEstimate, context_len: int
) -> PlanResult:
    """SGLang's token pool for one replica: ``page_size``-token pages, min over PP ranks."""
    if is_sglang_dots3(model):  # SWAKVPool: DSA full layers + an MLA sliding pool (dots3.py)
        return make_dots3_sglang_plan(request, model, gpu, weights, context_len)
    st = sglang_setup(request, model, gpu, weights)
    stages = plan_stages(st)
    tokens = min(stages.pool_tokens)  # PP: all-reduced MIN over ranks
    split = _split(st, tokens)
    capacity = split.full_tokens if split.full_tokens is not None else tokens
    ranks = [
        replace(
            r,
            kv_pool_bytes=state
            + (
                st.inkling.pool_bytes(r.pp_rank, tokens, split.swa_tokens or 0)
                if st.inkling is not None
                else _swa_pool_bytes(st, r.pp_rank, split)
                if st.swa_configurator
                else tokens * (r.kv_pool_bytes // t if t else 0)
            ),
        )
        for r, t, state in zip(
            stages.ranks, stages.pool_tokens, stages.state_pool_bytes, strict=True
        )
    ]  # the engine pool: the token pool plus the mamba state pool beside it
    max_running = _max_running(st, capacity, context_len, stages.mamba_size)
    if st.qwen4 is not None and stages.mamba_size is not None:
        st.notes.append(st.qwen4.beside_budget_note(stages.mamba_size, max_running))
    line = _log_line(st, stages, tokens, split)
    error = _error(st, stages, split, capacity, context_len, max_running)
    indices = LayerIndices([range(model.num_layers)] if st.own_cells else (r for _, r in st.attn))
    cell_max = stages.cell_max
    cell = (
        cell_max
        if st.dsa or st.own_cells
        else max((s.page_size_bytes for s, _ in st.attn), default=0)
    )
    page_size = st.page_size
    group = KvCacheGroup(
        0,
        VllmLayerSpec(
            indices[0] if indices else -1, "mla" if st.mla else "full", page_size, cell * page_size
        ),
        indices,
    )
    mamba_size = stages.mamba_size
    sg = SglangPool(
        mem_fraction_static=st.mem_fraction_static,
        mem_fraction_rule=st.rule.rule,
        cell_size_bytes=cell_max,
        rest_memory_bytes=stages.rest_min,
        max_total_num_tokens=tokens,
        page_size=page_size,
        max_running_requests=max_running,
        context_len=context_len,
        chunked_prefill_size=request.max_num_batched_tokens or st.rule.chunked_prefill_size,
        log_line=line,
        swa_full_tokens_ratio=split.swa_full_tokens_ratio
        if st.sliding or st.dsv4 is not None or st.inkling is not None
        else None,
        full_tokens=split.full_tokens,
        swa_tokens=split.swa_tokens,
        mamba_full_memory_ratio=st.mamba.ratio,
        mamba_state_bytes_per_request=st.mamba.state_per_req or None,
        max_mamba_cache_size=mamba_size,
        mamba_pool_bytes=None if mamba_size is None else max(stages.state_pool_bytes),
    )
    fits = error is None
    return PlanResult(
        model_id=model.model_id,
        engine="sglang",
        engine_version=st.version_text,
        gpu=gpu,
        tp=request.tp,
        pp=request.pp,
        kv_dtype=st.kv_dtype.name,
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
        available_kv_bytes=stages.rest_min,
        fits=fits,
        needed_bytes=context_len * cell_max,
        estimated_max_model_len=None if fits else max(0, capacity),
        error=error,
        log_lines=(line,),
        kv_bytes_per_token_per_rank=cell_max,
        kv_bytes_per_token_replica=stages.replica_per_token,
        weights=st.weights,
        ranks=tuple(ranks),
        sglang=sg,
        notes=tuple(st.notes) + st.weights.notes,
        headroom_fraction=request.headroom_fraction,
        defaults_applied=st.defaults,
    )
