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
from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.engine_checks import VllmStartSettings, check_vllm_start
from kvbudget.capacity.layouts.vllm import (
    VllmLayerSpec,
    get_pp_indices,
    vllm_layer_specs,
)
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
)
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.pool_text import format_gib_new
from kvbudget.capacity.remedies import fit_remedies
from kvbudget.capacity.versions import (
    DEFAULT_VLLM_VERSION,
    check_vllm_kv_dtype,
    vllm_behaviour,
)
from kvbudget.capacity.weights import WeightsEstimate, estimate_weights
from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import GpuSpec, custom_gpu, get_gpu
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.layer_runs import LayerIndices
from kvbudget.spec.model import ModelSpec
from kvbudget.units import GiB

__all__ = ["PlanRequest", "PlanResult", "batch_defaults", "make_plan", "resolve_gpu"]

#: vLLM 0.32 ``EngineArgs.get_batch_defaults`` (``vllm/engine/arg_utils.py``): when the device
#: cannot be queried, ``device_memory = 0`` and the "other hardware" defaults apply
#: (``max_num_batched_tokens`` 2048 for the API server, 8192 for the LLM class; 256 sequences).
_NO_DEVICE_BATCH_DEFAULTS = {True: (2048, 256), False: (8192, 256)}


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
    )


def plan_terms(
    request: PlanRequest,
    spec: ModelSpec,
    weights: WeightsEstimate,
    pp_rank: int,
    t_b: int,
    max_seqs: int,
) -> tuple[MemoryTerm, MemoryTerm, MemoryTerm, MemoryTerm]:
    w = weights.per_rank_bytes[pp_rank]
    weights_term = MemoryTerm(
        "weights", w, "flag" if weights.source == "flag" else weights.source, weights.method
    )
    act = (
        flag_term("activation", request.activation_bytes, "--activation-bytes")
        if request.activation_bytes is not None
        else estimate_activation_bytes(
            spec, tp=request.tp, max_num_batched_tokens=t_b, max_num_seqs=max_seqs
        )
    )
    non_torch = (
        flag_term("non_torch", request.non_torch_bytes, "--non-torch-bytes")
        if request.non_torch_bytes is not None
        else estimate_non_torch_bytes(tp=request.tp, pp=request.pp)
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
        else estimate_cudagraph_bytes(spec)
    )
    return weights_term, act, non_torch, graphs


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
    weights = estimate_weights(
        model, tp=request.tp, pp=request.pp, snapshot=snapshot, weights_bytes=request.weights_bytes
    )
    if request.engine == "sglang":
        from kvbudget.capacity.planner_sglang import make_sglang_plan

        result = make_sglang_plan(request, model, gpu, weights, max_model_len)
    else:
        result = _make_vllm_plan(request, model, gpu, weights, max_model_len, device_given)
        if request.auto_fit_max_model_len and not result.fits and result.estimated_max_model_len:
            fitted = result.estimated_max_model_len
            line = (
                f"Auto-fit max_model_len: reduced from {max_model_len} to {fitted} to fit in available "
                f"GPU memory ({format_gib_new(result.available_kv_bytes)} GiB available for KV cache)"
            )
            again = _make_vllm_plan(request, model, gpu, weights, fitted, device_given)
            result = replace(again, log_lines=(line, *again.log_lines))
    ignored = tuple(message for _, message in engine_flag_conflicts(request))
    return replace(result, notes=result.notes + ignored) if ignored else result


def _make_vllm_plan(
    request: PlanRequest,
    model: ModelSpec,
    gpu: GpuSpec,
    weights: WeightsEstimate,
    max_model_len: int,
    device_given: bool = True,
) -> PlanResult:
    version_text = request.engine_version or DEFAULT_VLLM_VERSION
    behaviour = vllm_behaviour(version_text)
    defaults: dict[str, str] = {}
    notes = list(behaviour.notes)
    if model.max_position_embeddings and max_model_len > model.max_position_embeddings:
        notes.append(
            f"max_model_len {max_model_len} exceeds the config's max_position_embeddings "
            f"{model.max_position_embeddings}: vLLM refuses this at start-up unless rope scaling "
            "raises its derived limit or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set"
        )
    if request.engine_version is None:
        defaults["engine_version"] = f"{DEFAULT_VLLM_VERSION} (kvbudget default)"
    if device_given:
        t_b_default, seqs_default, why = batch_defaults(
            gpu, api_server=request.api_server, version=behaviour.version
        )
    else:
        t_b_default, seqs_default = _NO_DEVICE_BATCH_DEFAULTS[request.api_server]
        why = "device not given: vLLM's defaults when it cannot query the device"
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
    kv_dtype = get_kv_dtype(request.kv_dtype, engine="vllm", model_dtype=model.torch_dtype)
    if request.kv_dtype.strip().lower() != "auto":
        check_vllm_kv_dtype(kv_dtype.name, behaviour.version)
    check_vllm_start(  # vLLM's own start-up checks, in its words (capacity/engine_checks.py)
        VllmStartSettings(behaviour.version, max_model_len, t_b, max_seqs, util, request.block_size)
    )
    free_at_start = gpu.memory_bytes - CUDA_CONTEXT_BYTES
    if request.kv_cache_memory_bytes is None and gpu.memory_bytes * util > free_at_start:
        notes.append(
            f"requested {gpu.memory_bytes * util / GiB:.2f} GiB exceeds the free memory at start-up "
            f"(about {free_at_start / GiB:.2f} GiB after a ~0.5 GiB CUDA context, estimate): vLLM would "
            "refuse with 'Free memory on device ... is less than desired GPU memory utilization'"
        )
    all_specs = vllm_layer_specs(
        model,
        kv_dtype=request.kv_dtype,
        tp=request.tp,
        pp=1,
        block_size=request.block_size,
        mamba_cache_mode=request.mamba_cache_mode,
        mamba_state_bytes=mamba_dtype_bytes(request.mamba_cache_dtype, "mamba_cache_dtype"),
        mamba_ssm_state_bytes=mamba_dtype_bytes(
            request.mamba_ssm_cache_dtype, "mamba_ssm_cache_dtype"
        ),
        align_to_block_size=behaviour.version >= (0, 32, 0),
        mamba2_checkpoint_blocks=1 if behaviour.version >= (0, 32, 0) else 0,
    )
    pool_layers = pool_templates.raise_attention_block_for_mamba(all_specs.map(_to_pool_layer))
    if request.disable_hybrid_kv_cache_manager:
        pool_layers = pool_templates.unify_hybrid_as_full(pool_layers)
        notes.append(
            "--disable-hybrid-kv-cache-manager: sliding/chunked layers are treated as full attention "
            "(the full-length cost is paid)"
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
        w, act, non_torch, graphs = plan_terms(request, model, weights, p, t_b, max_seqs)
        total_bytes = gpu.memory_bytes if device_given else 0
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
        page = groups[0].page_size_bytes if groups else 0
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
                kv_pool_bytes=blocks * page * size,
            )
        )
        rank_tok = _per_token_bytes(all_specs, rank_layers)
        per_token_rank = max(per_token_rank, rank_tok)
        per_token_replica += rank_tok * request.tp
    num_blocks = min(r.num_blocks for r in ranks)
    if request.num_gpu_blocks_override is not None:
        notes.append(f"num_gpu_blocks_override: {num_blocks} -> {request.num_gpu_blocks_override}")
        num_blocks = request.num_gpu_blocks_override
    # every worker allocates the common (minimum) number of blocks
    page_bytes = groups[0].page_size_bytes if groups else 0
    ranks = [replace(r, kv_pool_bytes=num_blocks * page_bytes * r.group_size) for r in ranks]
    mode = request.mamba_cache_mode
    conc = vpool.max_concurrency(behaviour, num_blocks, groups, max_model_len, t_b, mode)
    tokens = vpool.kv_cache_tokens(behaviour, num_blocks, groups, conc, max_model_len)
    tightest = min(ranks, key=lambda r: r.available_kv_bytes)
    per_layer = behaviour.error_style == "v09"  # ~v0.9 summed real layers (no padding)
    needed = vpool.needed_bytes(groups, max_model_len, t_b, mode, per_layer=per_layer)
    error: str | None = None
    estimated: int | None = None
    fits = True
    if groups and (tightest.available_kv_bytes <= 0 or needed > tightest.available_kv_bytes):
        fits = False
        avail = max(0, tightest.available_kv_bytes)
        estimated = vpool.estimate_max_model_len(
            avail, groups, max_model_len, t_b, mode, per_layer=per_layer
        )
        error = vpool.fit_error_text(
            behaviour,
            available_bytes=tightest.available_kv_bytes,
            needed=needed,
            max_model_len=max_model_len,
            estimated_len=estimated,
            kv_tokens=num_blocks * (groups[0].block_size if groups else 0),
        )
    remedies = (
        fit_remedies(request, tightest, needed, estimated, kv_dtype.element_bytes, max_model_len)
        if not fits
        else ()
    )
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


#: vLLM ``--quantization`` names kvbudget sizes weights for, and the config each one implies
#: when the checkpoint carries no ``quantization_config`` (vLLM's online defaults: fp8 dynamic
#: per-tensor, AWQ/GPTQ 4 bit in groups of 128).
QUANTIZATION_METHODS: dict[str, dict[str, object]] = {
    "fp8": {"quant_method": "fp8"},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128},
    "mxfp4": {"quant_method": "mxfp4"},
    "compressed-tensors": {"quant_method": "compressed-tensors"},
}


def with_quantization(model: ModelSpec, method: str | None) -> ModelSpec:
    """``--quantization``: the weights' method (vLLM's names). The KV dtype is not touched.

    As vLLM (``ModelConfig._verify_quantization``), a method that contradicts the config's
    ``quantization_config.quant_method`` is refused.
    """
    if method is None:
        return model
    name = method.strip().lower()
    if name in ("none", ""):
        return replace(model, quantization_config=None)
    existing = model.quantization_config
    if existing is not None:
        found = str(existing.get("quant_method", "")).lower()
        if found and found != name:
            raise ConfigError(
                f"quantization: --quantization {name} contradicts the config's quantization_config "
                f"({found}); vLLM refuses this; drop --quantization or pass --quantization {found}",
                field="quantization",
            )
        return model
    if name not in QUANTIZATION_METHODS or name == "compressed-tensors":
        known = ", ".join(m for m in QUANTIZATION_METHODS if m != "compressed-tensors")
        raise ConfigError(
            f"quantization: {method!r} is not a method kvbudget sizes without a quantization_config "
            f"(known: {known}); pass --weights-bytes from the engine log",
            field="quantization",
        )
    return replace(model, quantization_config=dict(QUANTIZATION_METHODS[name]))


MAMBA_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def mamba_dtype_bytes(name: str, field: str) -> int | None:
    """Element bytes of vLLM's ``--mamba-cache-dtype`` / ``--mamba-ssm-cache-dtype`` (None: auto)."""
    key = name.strip().lower()
    if key == "auto":
        return None
    if key not in MAMBA_DTYPE_BYTES:
        raise ConfigError(
            f"{field}: {name!r} is not one of vLLM's choices; use auto, float32, bfloat16 or float16",
            field=field,
        )
    return MAMBA_DTYPE_BYTES[key]


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
