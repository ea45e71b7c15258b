"""Each pipeline stage's memory and KV blocks as vLLM sizes them (weights, activation, graphs,
the KV memory left; the profiling warm-up that can stop it first), the common block count every
worker allocates, and the sampler's warm-up after CUDA-graph capture with the pool in place."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget.capacity import pool as vpool
from kvbudget.capacity.engines.vllm.groups import VllmSpecs, per_token_bytes
from kvbudget.capacity.engines.vllm.settings import plan_terms, stage_profile
from kvbudget.capacity.engines.vllm.start import EngineSettings
from kvbudget.capacity.layouts.vllm import get_pp_indices
from kvbudget.capacity.memory import CUDA_CONTEXT_BYTES, RankMemory, available_kv_bytes
from kvbudget.capacity.vllm_startup import sampler_warmup_after_capture_oom, warmup_oom
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.units import GiB

#: a post-capture sampler warm-up that fits by less than this, with estimated graphs, is noted
CLOSE_WARMUP_BYTES = GiB // 2


@dataclass(frozen=True)
class Stages:
    """Each pipeline stage's memory and pool, and the KV bytes a token costs."""

    ranks: list[RankMemory]
    per_token_rank: int
    per_token_replica: int
    #: vLLM stops at a stage's profiling warm-up (its words), or None
    refusal: str | None


def plan_stages(
    engine: EngineSettings,
    weights: WeightsEstimate,
    all_specs: VllmSpecs | None,
    groups: list[vpool.KvCacheGroup],
    draft_block_bytes: int,
    refusal: str | None,
) -> Stages:
    """Per stage: weights, activation, graphs, the KV memory left and the blocks it holds
    (an MTP drafter's layers and a draft model's blocks on the last stage)."""
    request, model, behaviour = engine.request, engine.model, engine.behaviour
    t_b, max_seqs = engine.max_num_batched_tokens, engine.max_num_seqs
    ranks: list[RankMemory] = []
    per_token_rank = 0
    per_token_replica = 0
    for p in range(request.pp):
        last_stage = p == request.pp - 1
        start, end = get_pp_indices(model.num_layers, p, request.pp)
        rank_layers = stage_layers(model.num_layers, groups, p, request.pp)
        w, act, non_torch, graphs = plan_terms(
            request, model, weights, p, t_b, max_seqs, behaviour.version
        )
        total_bytes = engine.device_total_bytes if engine.device_given else 0
        if refusal is None and engine.device_given and engine.profiled:
            refusal = warmup_oom(
                stage_profile(request, model, p, t_b, max_seqs),
                free_at_start_bytes=engine.device_total_bytes - CUDA_CONTEXT_BYTES,
                resident_bytes=w.num_bytes + non_torch.num_bytes,
                num_reqs=min(t_b, max_seqs),
            )
        requested, avail = available_kv_bytes(
            total_bytes=total_bytes,
            gpu_memory_utilization=engine.gpu_memory_utilization,
            weights=w.num_bytes,
            activation=act.num_bytes,
            non_torch=non_torch.num_bytes,
            cudagraph=graphs.num_bytes,
            subtract_cudagraph=behaviour.subtracts_cudagraphs,
            kv_cache_memory_bytes=request.kv_cache_memory_bytes,
        )
        blocks = vpool.num_blocks_for(avail, groups, rank_layers)
        block_bytes = vpool.bytes_per_block(groups, rank_layers)
        if draft_block_bytes and last_stage:  # one uniform-type group (capacity.draft)
            blocks = max(0, avail // (block_bytes + draft_block_bytes))
        ranks.append(
            RankMemory(
                pp_rank=p,
                total_bytes=total_bytes,
                gpu_memory_utilization=engine.gpu_memory_utilization,
                requested_bytes=requested,
                weights=w,
                activation=act,
                non_torch=non_torch,
                cudagraph=graphs,
                cudagraph_subtracted=behaviour.subtracts_cudagraphs,
                kv_cache_memory_override=request.kv_cache_memory_bytes is not None,
                available_kv_bytes=avail,
                num_layers=end - start,
                group_size=vpool.group_size_on(groups, rank_layers),
                num_blocks=blocks,
                kv_pool_bytes=blocks * block_bytes,
            )
        )
        rank_tok = per_token_bytes(all_specs, groups, rank_layers)
        if draft_block_bytes and last_stage and groups:
            rank_tok += draft_block_bytes // groups[0].block_size
        per_token_rank = max(per_token_rank, rank_tok)
        per_token_replica += rank_tok * request.tp
    return Stages(ranks, per_token_rank, per_token_replica, refusal)


def stage_layers(num_layers: int, groups: list[vpool.KvCacheGroup], p: int, pp: int) -> range:
    """The layer indices of stage ``p``: vLLM's ``get_pp_indices``, and on the last stage an MTP
    drafter's layers (indices past the target's)."""
    start, end = get_pp_indices(num_layers, p, pp)
    if p < pp - 1:
        return range(start, end)
    drafted = max((g.layer_indices[len(g.layer_indices) - 1] + 1 for g in groups), default=0)
    return range(start, max(end, drafted))


def common_blocks(
    engine: EngineSettings, ranks: list[RankMemory], groups: list[vpool.KvCacheGroup]
) -> tuple[int, list[RankMemory]]:
    """Every worker allocates the common (minimum) number of blocks (or the override): that
    number, and each stage's pool bytes at it."""
    num_blocks = min(r.num_blocks for r in ranks)
    override = engine.request.num_gpu_blocks_override
    if override is not None:
        engine.notes.append(f"num_gpu_blocks_override: {num_blocks} -> {override}")
        num_blocks = override
    page_bytes = groups[0].page_size_bytes if groups else 0
    uniform = any(g.uniform_type for g in groups)  # packed pages: one block = the widest group
    pp, num_layers = engine.request.pp, engine.model.num_layers

    def block_bytes(r: RankMemory) -> int:
        if not uniform:
            return page_bytes * r.group_size
        # each worker re-planned at the common count of its own projected groups' blocks
        # (v1/core/kv_cache_utils.py get_kv_cache_configs, lines 2662-2678)
        return vpool.bytes_per_block(groups, stage_layers(num_layers, groups, r.pp_rank, pp))

    return num_blocks, [replace(r, kv_pool_bytes=num_blocks * block_bytes(r)) for r in ranks]


def sampler_after_capture(engine: EngineSettings, last: RankMemory) -> str | None:
    """The sampler's warm-up after CUDA-graph capture on the last stage, with the pool
    allocated: vLLM's words when it runs out, and a note when the graphs are an estimate and
    it is short or a close call."""
    request = engine.request
    if not (engine.device_given and engine.profiled and request.kv_cache_memory_bytes is None):
        return None
    t_b, max_seqs = engine.max_num_batched_tokens, engine.max_num_seqs
    model = engine.model
    refusal, margin = sampler_warmup_after_capture_oom(
        stage_profile(request, model, request.pp - 1, t_b, max_seqs),
        free_at_start_bytes=engine.device_total_bytes - CUDA_CONTEXT_BYTES,
        held_bytes=last.weights.num_bytes
        + last.non_torch.num_bytes
        + last.kv_pool_bytes
        + last.cudagraph.num_bytes,
        unkept_forward_bytes=(t_b - min(t_b, max_seqs))
        * (model.hidden_size or 0)
        * (model.dtype_bytes or 2),
        num_reqs=min(t_b, max_seqs),
    )
    graphs_gib = last.cudagraph.num_bytes / GiB
    if last.cudagraph.source == "estimated" and (refusal or margin < CLOSE_WARMUP_BYTES):
        engine.notes.append(
            f"sampler warm-up after CUDA-graph capture: "
            f"{'short' if refusal else 'fits'} by {abs(margin) / GiB:.2f} GiB with the graphs "
            f"at {graphs_gib:.2f} GiB (an estimate){'' if refusal else ': a close call'}; "
            "pass --cudagraph-bytes from the engine log to settle it"
        )
    return refusal
