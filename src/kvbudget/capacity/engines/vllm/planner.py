"""vLLM's plan of one replica: settings -> groups (``groups``) -> per-stage memory (``memory``)
-> ``num_blocks`` (min over pipeline stages) -> the start-up log lines, the concurrency figure
and the fit check, each as the requested engine version computes them."""

from __future__ import annotations

from dataclasses import replace

from kvbudget.capacity import pool as vpool
from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.engine_checks import VllmStartSettings, check_vllm_start
from kvbudget.capacity.engines.vllm.groups import per_token_bytes, vllm_groups
from kvbudget.capacity.engines.vllm.settings import (
    NO_DEVICE_BATCH_DEFAULTS,
    PROFILE_RUN_SINCE,
    batch_defaults,
    default_mamba_cache_mode,
    mla_backend_block_size,
    plan_terms,
    stage_profile,
)
from kvbudget.capacity.layouts.vllm import get_pp_indices
from kvbudget.capacity.layouts.vllm_dots3 import is_dots3_note
from kvbudget.capacity.memory import CUDA_CONTEXT_BYTES, RankMemory, available_kv_bytes
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.pool_dots3 import check_dots3_device
from kvbudget.capacity.remedies import fit_remedies
from kvbudget.capacity.versions import (
    DEFAULT_VLLM_VERSION,
    Version,
    check_vllm_kv_dtype,
    vllm_async_scheduling,
    vllm_behaviour,
    vllm_concurrent_batches,
)
from kvbudget.capacity.vllm_startup import (
    max_len_refusal,
    sampler_warmup_after_capture_oom,
    vllm_total_bytes,
    warmup_oom,
)
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.units import GiB

#: a post-capture sampler warm-up that fits by less than this, with estimated graphs, is noted
CLOSE_WARMUP_BYTES = GiB // 2


def _concurrent_batches(
    request: PlanRequest,
    version: Version,
    device_given: bool,
    groups: list[vpool.KvCacheGroup],
    notes: list[str],
) -> int:
    """Batches in flight that a sliding-window or chunked-local group reserves for (vLLM
    0.26+ ``max_in_flight_tokens``): async scheduling on a GPU (the version's default unless
    --async-scheduling / --no-async-scheduling is given); the CPU build (no device given)
    turns async scheduling off (vLLM 0.32.0 ``platforms/cpu.py`` line 331)."""
    asynchronous = (
        device_given
        and vllm_async_scheduling(version, request.pp, request.async_scheduling).enabled
    )
    if not device_given and request.async_scheduling:
        notes.append(
            "async_scheduling: ignored without a device: the CPU build schedules synchronously "
            "whatever the flag says (vLLM 0.32.0 platforms/cpu.py line 331)"
        )
    batches = vllm_concurrent_batches(version, request.pp, asynchronous)
    if batches > 1 and any(g.sliding_window or g.attention_chunk_size for g in groups):
        notes.append(
            f"sliding-window and chunked-local groups reserve for {batches} batches in flight "
            f"({batches} x max_num_batched_tokens: vLLM max_in_flight_tokens, since 0.26.0, "
            f"async scheduling {'on' if asynchronous else 'off'}, pp {request.pp})"
        )
    return batches


def make_vllm_plan(
    request: PlanRequest,
    model: ModelSpec,
    gpu: GpuSpec,
    weights: WeightsEstimate,
    max_model_len: int,
    device_given: bool = True,
    draft_block_bytes: int = 0,
) -> PlanResult:
    """``draft_block_bytes``: KV bytes a draft model adds to each block of the last stage."""
    version_text = request.engine_version or DEFAULT_VLLM_VERSION
    behaviour = vllm_behaviour(version_text)
    defaults: dict[str, str] = {}
    notes = list(behaviour.notes)
    refusal = max_len_refusal(model, max_model_len, request.allow_long_max_model_len)
    if request.engine_version is None:
        defaults["engine_version"] = f"{DEFAULT_VLLM_VERSION} (kvbudget default)"
    if device_given:
        t_b_default, seqs_default, why = batch_defaults(
            gpu, api_server=request.api_server, version=behaviour.version
        )
    else:
        t_b_default, seqs_default = NO_DEVICE_BATCH_DEFAULTS[request.api_server]
        why = (
            "device not given: vLLM's defaults on a >= 70 GiB GPU (H100/H200 class); on an A100 "
            "or a smaller GPU pass --gpu or --max-num-batched-tokens "
            f"{2048 if request.api_server else 8192} --max-num-seqs 256"
        )
    t_b = request.max_num_batched_tokens or t_b_default
    max_seqs = request.max_num_seqs or seqs_default
    if request.max_num_batched_tokens is None:
        defaults["max_num_batched_tokens"] = f"{t_b} ({why})"
        if behaviour.version < (0, 8, 0):
            notes.append(
                "batch defaults are vLLM V1's (reference §3.4); V0-era engines used others - pass "
                "--max-num-batched-tokens / --max-num-seqs"
            )
    if request.max_num_seqs is None:
        defaults["max_num_seqs"] = f"{max_seqs} ({why})"
    util = request.gpu_memory_utilization or behaviour.default_gpu_memory_utilization
    if request.gpu_memory_utilization is None and request.kv_cache_memory_bytes is None:
        defaults["gpu_memory_utilization"] = f"{util} (vLLM default; the newest snapshot uses 0.92)"
    # --kv-cache-dtype auto follows the dtype --dtype resolved, float32 included (with_dtype)
    kv_name = request.kv_dtype
    kv_dtype = get_kv_dtype(kv_name, engine="vllm", model_dtype=model.torch_dtype)
    if request.kv_dtype.strip().lower() != "auto":
        check_vllm_kv_dtype(kv_dtype.name, behaviour.version)
    check_vllm_start(  # vLLM's own start-up checks, in its words (capacity/engine_checks.py)
        VllmStartSettings(behaviour.version, max_model_len, t_b, max_seqs, util, request.block_size)
    )
    block_size = request.block_size
    mla_block = mla_backend_block_size(model, gpu, behaviour.version, kv_dtype.name)
    if block_size is None and mla_block is not None:
        block_size = mla_block
        notes.append(
            f"block size {mla_block} for MLA: vLLM {version_text} picks FLASH_ATTN_MLA first on "
            "Hopper and keeps its default 16 (0.19.0 platforms/cuda.py backend priorities, "
            "update_block_size_for_backend); pass --block-size for another backend"
        )
    device_total, total_note = vllm_total_bytes(gpu)
    if total_note and device_given:
        notes.append(total_note)
    free_at_start = device_total - CUDA_CONTEXT_BYTES
    if request.kv_cache_memory_bytes is None and device_total * util > free_at_start:
        notes.append(
            f"requested {device_total * util / GiB:.2f} GiB exceeds the free memory at start-up "
            f"(about {free_at_start / GiB:.2f} GiB after a ~0.5 GiB CUDA context, estimate): vLLM would "
            "refuse with 'Free memory on device ... is less than desired GPU memory utilization'"
        )
    mamba_mode = request.mamba_cache_mode or default_mamba_cache_mode(model, behaviour.version)
    if request.mamba_cache_mode is None and mamba_mode != "none":
        defaults["mamba_cache_mode"] = (
            f"{mamba_mode} (vLLM {version_text} turns prefix caching on for hybrid models, and "
            "with it mamba cache mode align; --mamba-cache-mode none for --no-enable-prefix-caching)"
        )
    if is_dots3_note(model):
        check_dots3_device(gpu.compute_capability_major)
    kv_dtype, all_specs, groups = vllm_groups(
        request, model, behaviour, version_text, kv_dtype, block_size, mamba_mode, notes
    )
    ranks: list[RankMemory] = []
    per_token_rank = 0
    per_token_replica = 0
    for p in range(request.pp):
        start, end = get_pp_indices(model.num_layers, p, request.pp)
        # an MTP drafter's layers (indices past the target's) sit on the last stage
        drafted = max((g.layer_indices[len(g.layer_indices) - 1] + 1 for g in groups), default=0)
        rank_layers = range(start, max(end, drafted) if p == request.pp - 1 else end)
        w, act, non_torch, graphs = plan_terms(
            request, model, weights, p, t_b, max_seqs, behaviour.version
        )
        total_bytes = device_total if device_given else 0
        profiled = request.activation_bytes is None and behaviour.version >= PROFILE_RUN_SINCE
        if refusal is None and device_given and profiled:
            refusal = warmup_oom(
                stage_profile(request, model, p, t_b, max_seqs),
                free_at_start_bytes=device_total - CUDA_CONTEXT_BYTES,
                resident_bytes=w.num_bytes + non_torch.num_bytes,
                num_reqs=min(t_b, max_seqs),
            )
        requested, avail = available_kv_bytes(
            total_bytes=total_bytes,
            gpu_memory_utilization=util,
            weights=w.num_bytes,
            activation=act.num_bytes,
            non_torch=non_torch.num_bytes,
            cudagraph=graphs.num_bytes,
            subtract_cudagraph=behaviour.subtracts_cudagraphs,
            kv_cache_memory_bytes=request.kv_cache_memory_bytes,
        )
        size = vpool.group_size_on(groups, rank_layers)
        blocks = vpool.num_blocks_for(avail, groups, rank_layers)
        block_bytes = vpool.bytes_per_block(groups, rank_layers)
        if draft_block_bytes and p == request.pp - 1:  # one uniform-type group (capacity.draft)
            blocks = max(0, avail // (block_bytes + draft_block_bytes))
        ranks.append(
            RankMemory(
                pp_rank=p,
                total_bytes=total_bytes,
                gpu_memory_utilization=util,
                requested_bytes=requested,
                weights=w,
                activation=act,
                non_torch=non_torch,
                cudagraph=graphs,
                cudagraph_subtracted=behaviour.subtracts_cudagraphs,
                kv_cache_memory_override=request.kv_cache_memory_bytes is not None,
                available_kv_bytes=avail,
                num_layers=end - start,
                group_size=size,
                num_blocks=blocks,
                kv_pool_bytes=blocks * block_bytes,
            )
        )
        rank_tok = per_token_bytes(all_specs, groups, rank_layers)
        if draft_block_bytes and p == request.pp - 1 and groups:
            rank_tok += draft_block_bytes // groups[0].block_size
        per_token_rank = max(per_token_rank, rank_tok)
        per_token_replica += rank_tok * request.tp
    num_blocks = min(r.num_blocks for r in ranks)
    if request.num_gpu_blocks_override is not None:
        notes.append(f"num_gpu_blocks_override: {num_blocks} -> {request.num_gpu_blocks_override}")
        num_blocks = request.num_gpu_blocks_override
    # every worker allocates the common (minimum) number of blocks
    page_bytes = groups[0].page_size_bytes if groups else 0
    uniform = any(g.uniform_type for g in groups)  # packed pages: one block = the widest group
    ranks = [
        replace(
            r,
            kv_pool_bytes=num_blocks
            * (vpool.bytes_per_block(groups) if uniform else page_bytes * r.group_size),
        )
        for r in ranks
    ]
    last = ranks[-1]
    profiled = request.activation_bytes is None and behaviour.version >= PROFILE_RUN_SINCE
    if refusal is None and device_given and profiled and request.kv_cache_memory_bytes is None:
        refusal, margin = sampler_warmup_after_capture_oom(
            stage_profile(request, model, request.pp - 1, t_b, max_seqs),
            free_at_start_bytes=device_total - CUDA_CONTEXT_BYTES,
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
            notes.append(
                f"sampler warm-up after CUDA-graph capture: "
                f"{'short' if refusal else 'fits'} by {abs(margin) / GiB:.2f} GiB with the graphs "
                f"at {graphs_gib:.2f} GiB (an estimate){'' if refusal else ': a close call'}; "
                "pass --cudagraph-bytes from the engine log to settle it"
            )
    mode = mamba_mode
    in_flight = t_b * _concurrent_batches(
        request, behaviour.version, device_given, list(groups), notes
    )
    conc = vpool.max_concurrency(behaviour, num_blocks, groups, max_model_len, in_flight, mode)
    tokens = vpool.kv_cache_tokens(behaviour, num_blocks, groups, conc, max_model_len)
    tightest = min(ranks, key=lambda r: r.available_kv_bytes)
    per_layer = behaviour.error_style == "v09"  # ~v0.9 summed real layers (no padding)
    needed = vpool.needed_bytes(groups, max_model_len, in_flight, mode, per_layer=per_layer)
    if draft_block_bytes and groups:
        needed += draft_block_bytes * -(-max_model_len // groups[0].block_size)
    error: str | None = None
    estimated: int | None = None
    fits = True
    if groups and (tightest.available_kv_bytes <= 0 or needed > tightest.available_kv_bytes):
        fits = False
        avail = max(0, tightest.available_kv_bytes)
        estimated = vpool.estimate_max_model_len(
            avail, groups, max_model_len, in_flight, mode, per_layer=per_layer
        )
        error = vpool.fit_error_text(
            behaviour,
            available_bytes=tightest.available_kv_bytes,
            needed=needed,
            max_model_len=max_model_len,
            estimated_len=estimated,
            kv_tokens=num_blocks * (groups[0].block_size if groups else 0),
        )
    weights_alone = tightest.weights.num_bytes >= tightest.requested_bytes
    remedies = (
        fit_remedies(
            request,
            tightest,
            needed,
            None if weights_alone else estimated,
            kv_dtype.element_bytes,
            max_model_len,
            weights_quantization=weights.quantization,
        )
        if not fits or weights_alone
        else ()
    )
    if refusal is not None:  # vLLM stops before the pool is sized: its words are the answer
        # its knobs stay only when the weights alone are why (fp8 weights, more GPUs): a length
        # refusal's knob is --max-model-len, in its words
        fits, error, estimated = False, refusal, None
        remedies = remedies if weights_alone else ()
    if request.pp > 1:
        notes.append(
            "fit check counts every layer of the model against one stage's memory, as the engine "
            "log of issue vllm#34076 shows; num_blocks is min over stages of avail // page // layers_on_stage"
        )
    lines = vpool.log_lines(
        behaviour,
        available_bytes=tightest.available_kv_bytes,
        num_blocks=num_blocks,
        tokens=tokens,
        concurrency=conc,
        max_model_len=max_model_len,
    )
    return PlanResult(
        model_id=model.model_id,
        engine="vllm",
        engine_version=version_text,
        gpu=gpu,
        tp=request.tp,
        pp=request.pp,
        kv_dtype=kv_dtype.name,
        max_model_len=max_model_len,
        max_num_batched_tokens=t_b,
        max_in_flight_tokens=in_flight,
        max_num_seqs=max_seqs,
        block_size=min((g.block_size for g in groups), default=request.block_size or 16),
        groups=tuple(groups),
        group_size=vpool.group_size_on(groups),
        num_padding_layers=sum(g.num_padding_layers for g in groups),
        page_size_bytes=groups[0].page_size_bytes if groups else 0,
        num_blocks=num_blocks,
        num_usable_blocks=max(0, num_blocks - 1),
        kv_cache_tokens=tokens,
        max_concurrency=conc,
        available_kv_bytes=tightest.available_kv_bytes,
        fits=fits,
        needed_bytes=needed,
        estimated_max_model_len=estimated,
        error=error,
        log_lines=lines,
        kv_bytes_per_token_per_rank=per_token_rank,
        kv_bytes_per_token_replica=per_token_replica,
        weights=weights,
        ranks=tuple(ranks),
        mamba_cache_mode=mode,
        notes=tuple(notes) + weights.notes,
        remedies=remedies,
        headroom_fraction=request.headroom_fraction,
        defaults_applied=defaults,
        device_given=device_given,
    )
