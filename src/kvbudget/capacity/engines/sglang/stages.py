"""Each pipeline stage of an SGLang replica: its cell (bytes per token, the family's rule plus a
drafter's layers), the memory left after weights (``rest``), the mamba state pool or
DeepSeek-V4's rings taken from it, and the tokens the rest holds (``max_total_num_tokens``)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.engines.sglang import dsv4 as v4
from kvbudget.capacity.engines.sglang.mamba import layers_in
from kvbudget.capacity.engines.sglang.setup import SglangSetup
from kvbudget.capacity.engines.sglang.speculative import dsa_latent_cell
from kvbudget.capacity.layouts.grouping import group_by_kind
from kvbudget.capacity.layouts.sglang import (
    minimax_m3_k_only_layers,
    sglang_cell_bytes,
    sglang_dsa_cell_bytes,
    sglang_minimax_m3_cell_bytes,
)
from kvbudget.capacity.memory import (
    CUDA_CONTEXT_BYTES,
    MemoryTerm,
    RankMemory,
    estimate_non_torch_bytes,
    flag_term,
)
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.sglang_pool import (
    hybrid_swa_max_total_tokens,
    mamba_state_pool,
    max_total_num_tokens,
    rest_memory_bytes,
)
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.layers import MLA, FullAttention
from kvbudget.spec.model import ModelSpec


@dataclass(frozen=True)
class SglangStages:
    """Every stage's memory and tokens (the replica's pool is the minimum), and the largest
    cell."""

    ranks: list[RankMemory]
    pool_tokens: list[int]
    #: the mamba state pool (or DeepSeek-V4's rings) of each stage, 0 without one
    state_pool_bytes: list[int]
    cell_max: int
    #: the drafter's share of ``cell_max`` (its own pool logs its own line)
    draft_max: int
    rest_min: int
    replica_per_token: int
    #: the smallest stage's mamba cache size (None: no state pool)
    mamba_size: int | None


def stage_cell(st: SglangSetup, start: int, end: int) -> int:
    """Bytes per token of layers ``[start, end)`` on one rank, by the family's rule."""
    model, kv_dtype = st.model, st.kv_dtype
    if st.dsa:
        return dsa_cell(model, start, end, kv_dtype, st.raw_fp8)
    if st.dsv4 is not None:
        return v4.rank_cell_bytes(model, start, end, st.dsv4)
    if st.msa:
        return msa_cell(model, start, end, kv_dtype, st.request.tp)
    if st.inkling is not None:
        return st.inkling.cell(start, end)
    if st.qwen4 is not None:
        return st.qwen4.cell(start, end)
    return sum(s.page_size_bytes * layers_in(r, start, end) for s, r in st.attn)


def plan_stages(st: SglangSetup) -> SglangStages:
    """Per pipeline stage: the cell, the rest, the state pool, the tokens, its memory terms."""
    request, model, gpu, draft, mamba = st.request, st.model, st.gpu, st.draft, st.mamba
    st.notes.append(
        "free memory before weights taken as device memory minus 512 MiB CUDA context (estimate)"
    )
    ranks: list[RankMemory] = []
    pool_tokens: list[int] = []
    state_pool_bytes: list[int] = []
    cell_max = draft_max = rest_min = replica_per_token = 0
    mamba_size: int | None = None
    for p in range(request.pp):
        start, end = st.pp_indices(p)
        cell = stage_cell(st, start, end)
        draft_cell = 0
        # the draft's layers priced into the cell (DeepSeek-V4's own rule prices it: dsv4.py)
        if draft is not None and draft.num_layers and st.dsv4 is None:
            latent = dsa_latent_cell(model, st.kv_dtype) if draft.dsa else 0
            draft_cell = draft.cell_bytes(cell, end - start, latent)
            draft_max = max(draft_max, draft_cell)
            cell += draft_cell
        cell_max = max(cell_max, cell)
        replica_per_token += cell * request.tp
        w = st.weights.per_rank_bytes[p]
        other, rest = stage_rest(
            request,
            weights_bytes=w - (draft.weights_bytes if draft and st.legacy_draft else 0),
            mem_fraction_static=st.mem_fraction_static,
            gpu=gpu,
            reserved_bytes=st.qwen4.reserved_bytes if st.qwen4 is not None else 0,
        )
        token_rest = rest
        state_bytes = 0
        if mamba.state_per_req and mamba.ratio is not None:
            # the same stage_per_req on every rank (kv_cache_configurator.py lines 3234-3258)
            size, state_bytes, token_rest = mamba_state_pool(
                rest, mamba.state_per_req, mamba.ratio, padding_slot=mamba.padded
            )
            mamba_size = size if mamba_size is None else min(mamba_size, size)
        if st.dsv4 is not None:  # its c128 compressor-state rings: fixed bytes taken first
            state_bytes = v4.rank_fixed_bytes(model, start, end, st.dsv4)
        state_pool_bytes.append(state_bytes)
        tokens = _stage_tokens(st, token_rest, start, end, cell, draft_cell)
        pool_tokens.append(tokens)
        rest_min = rest if p == 0 else min(rest_min, rest)
        ranks.append(
            stage_memory(
                request,
                gpu,
                st.weights,
                p,
                mem_fraction_static=st.mem_fraction_static,
                non_torch=other,
                rest=rest,
                num_layers=end - start,
                num_blocks=tokens // st.page_size,
                kv_pool_bytes=tokens * cell,
            )
        )
    return SglangStages(
        ranks, pool_tokens, state_pool_bytes, cell_max, draft_max, rest_min, replica_per_token,
        mamba_size,
    )  # fmt: skip


def stage_rest(
    request: PlanRequest,
    *,
    weights_bytes: int,
    mem_fraction_static: float,
    gpu: GpuSpec,
    reserved_bytes: int = 0,
) -> tuple[MemoryTerm, int]:
    """One stage's non-torch term and the bytes its pools get (``rest``): the
    ``--kv-cache-memory-bytes`` given, else SGLang's ``rest_memory_bytes`` after
    ``weights_bytes`` less ``reserved_bytes`` (Dots3-Note's multimodal buffers)."""
    other = (
        flag_term("non_torch", request.non_torch_bytes, "--non-torch-bytes")
        if request.non_torch_bytes is not None
        else estimate_non_torch_bytes(tp=request.tp, pp=request.pp)
    )
    if request.kv_cache_memory_bytes is not None:
        return other, request.kv_cache_memory_bytes
    rest = rest_memory_bytes(
        total_free_bytes=gpu.memory_bytes - CUDA_CONTEXT_BYTES,
        weights_bytes=weights_bytes,
        other_bytes=other.num_bytes,
        mem_fraction_static=mem_fraction_static,
    )
    return other, rest - reserved_bytes


def stage_memory(
    request: PlanRequest,
    gpu: GpuSpec,
    weights: WeightsEstimate,
    pp_rank: int,
    *,
    mem_fraction_static: float,
    non_torch: MemoryTerm,
    rest: int,
    num_layers: int,
    num_blocks: int,
    kv_pool_bytes: int,
) -> RankMemory:
    """One stage's memory terms as SGLang splits them: weights, the non-torch term, and
    activations and CUDA graphs inside the ``(1 - mem_fraction_static)`` share."""
    inside = "not a separate term in SGLang: it lives in the (1 - mem_fraction_static) share"
    w = weights.per_rank_bytes[pp_rank]
    return RankMemory(
        pp_rank=pp_rank,
        total_bytes=gpu.memory_bytes,
        gpu_memory_utilization=mem_fraction_static,
        requested_bytes=int((gpu.memory_bytes - CUDA_CONTEXT_BYTES) * mem_fraction_static),
        weights=MemoryTerm("weights", w, weights.source, weights.method),
        activation=MemoryTerm("activation", 0, "computed", inside),
        non_torch=non_torch,
        cudagraph=MemoryTerm("cudagraph", 0, "computed", inside),
        cudagraph_subtracted=False,
        kv_cache_memory_override=request.kv_cache_memory_bytes is not None,
        available_kv_bytes=rest,
        num_layers=num_layers,
        group_size=1,
        num_blocks=num_blocks,
        kv_pool_bytes=kv_pool_bytes,
    )


def _stage_tokens(
    st: SglangSetup, token_rest: int, start: int, end: int, cell: int, draft_cell: int
) -> int:
    """The tokens ``token_rest`` holds on this stage: the family's rule, else SGLang's
    ``max_total_num_tokens`` (0.5.4's drafter: the target's cell, then raised)."""
    cap = st.request.max_total_tokens
    if st.dsv4 is not None:
        return v4.rank_tokens(st.model, start, end, token_rest, st.dsv4, cap)
    if st.inkling is not None:
        return st.inkling.max_tokens(token_rest, start, end, cap)
    if st.draft is not None and st.legacy_draft:
        return st.draft.legacy_tokens(token_rest, cell - draft_cell, st.page_size, cap)
    if st.swa_configurator:  # 0.5.23: full tokens of int(rest // (F + r x S)), then the cap
        assert st.swa_full_tokens_ratio is not None
        full, swa = swa_cells(st, start, end)
        # a drafter's layers priced on the full side (kvbudget's assumption: 0.5.23 adds its
        # full layers there, its sliding ones beside the ratio, pool_configurator.py 786-803)
        tokens = hybrid_swa_max_total_tokens(
            token_rest, full + draft_cell, swa, st.swa_full_tokens_ratio
        )
        return (tokens if cap is None else min(tokens, cap)) // st.page_size * st.page_size
    return max_total_num_tokens(token_rest, cell, page_size=st.page_size, max_total_tokens=cap)


def swa_cells(st: SglangSetup, start: int, end: int) -> tuple[int, int]:
    """Bytes per token of the full and of the sliding layers in ``[start, end)`` on one rank
    (0.5.23 ``HybridSWAPoolConfigurator``: per-layer bytes x this stage's layer count,
    ``pool_configurator.py`` lines 665-666, 772-784)."""
    full = sum(s.page_size_bytes * layers_in(r, start, end) for s, r in st.attn if not s.windowed)
    swa = sum(s.page_size_bytes * layers_in(r, start, end) for s, r in st.sliding)
    return full, swa


def dsa_cell(model: ModelSpec, start: int, end: int, kv_dtype: KvDtype, raw_fp8: bool) -> int:
    """Bytes per token of layers ``[start, end)`` in SGLang's ``DSATokenToKVPool``."""
    return sum(
        members.total(
            lambda x: (
                sglang_dsa_cell_bytes(x, kv_dtype, raw_fp8=raw_fp8) if isinstance(x, MLA) else 0
            )
        )
        for _key, members in group_by_kind(model.layers[start:end])
    )


def msa_cell(
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
