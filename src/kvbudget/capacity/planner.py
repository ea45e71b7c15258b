"""``make_plan(PlanRequest) -> PlanResult``: the engine's KV pool for one replica.

What every engine shares is here: the model resolved into layers, the device, ``max_model_len``,
the weights, the notes on ignored knobs and data parallelism. The rest is the engine's planner,
looked up by ``request.engine`` in the registry (``capacity/engines/``: vLLM's in
``engines/vllm``, SGLang's in ``engines/sglang``).
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.capacity.dsv41_engines import refuse_dsv41_engine
from kvbudget.capacity.engines.registry import engine_entry, engine_planner
from kvbudget.capacity.engines.vllm.settings import batch_defaults, stage_profile
from kvbudget.capacity.layouts.base import PpSplit, get_pp_indices
from kvbudget.capacity.model_dtype import with_dtype, with_quantization
from kvbudget.capacity.moe_ranks import vllm_moe_ranks
from kvbudget.capacity.plan_model import resolve_spec
from kvbudget.capacity.plan_types import PlanRequest, PlanResult, request_snapshot
from kvbudget.capacity.weights import estimate_weights
from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import GpuSpec, custom_gpu, get_gpu
from kvbudget.spec.model import ModelSpec

# batch_defaults and stage_profile are vLLM's (engines/vllm/settings.py), re-exported for callers
__all__ = [
    "PlanRequest",
    "PlanResult",
    "batch_defaults",
    "engine_flag_conflicts",
    "make_plan",
    "resolve_gpu",
    "stage_profile",
]


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


def _pp_split(planner: object, request: PlanRequest, model: ModelSpec) -> PpSplit:
    """The engine's layer split over ``--pp`` (its planner's optional ``pp_split``), else vLLM's."""
    own = getattr(planner, "pp_split", None)
    split: PpSplit = own(request, model) if own is not None else get_pp_indices
    return split


def make_plan(request: PlanRequest, spec: ModelSpec | None = None) -> PlanResult:
    """Plan one replica; ``spec`` skips model resolution (tests, callers that already have it)."""
    planner = engine_planner(request.engine)
    model = resolve_spec(request, spec)
    refuse_dsv41_engine(model, engine_entry(request.engine).name)  # V4.1: vLLM only
    if request.pp > model.num_layers:
        raise ConfigError(
            f"pp: {request.pp} stages for {model.num_layers} layers; choose --pp <= {model.num_layers}",
            field="pp",
        )
    device_given = bool(request.gpu) or request.gpu_memory_bytes is not None
    if not device_given and request.kv_cache_memory_bytes is not None:
        if not planner.pool_without_device:
            raise ConfigError(
                f"gpu: no device given; --engine {request.engine} sizes its pool from the device "
                "even with --kv-cache-memory; pass --gpu H100 (see 'kvbudget gpus') or "
                "--gpu-memory 80GiB",
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
    snapshot = request_snapshot(request)  # --snapshot, or --model when it is a snapshot folder
    model = with_quantization(model, request.quantization)
    model = with_dtype(model, request.dtype)
    dp = request.data_parallel_size
    planner.check_request(request)
    weights = estimate_weights(
        model,
        tp=request.tp,
        pp=request.pp,
        snapshot=snapshot,
        weights_bytes=request.weights_bytes,
        moe_ranks=vllm_moe_ranks(request, model),
        pp_split=_pp_split(planner, request, model),
    )
    result = planner.plan(request, model, gpu, weights, max_model_len, device_given)
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


def engine_flag_conflicts(request: PlanRequest) -> list[tuple[str, str]]:
    """``(field, message)`` for each knob the chosen engine does not have (make_plan ignores them)."""
    return engine_planner(request.engine).flag_conflicts(request)
