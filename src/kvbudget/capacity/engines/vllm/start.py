"""What vLLM resolves before it sizes anything: the version's behaviour, the batch and memory
settings (given, or the version's defaults on this GPU, each default said), the KV cache dtype
and block size, the mamba cache mode, and vLLM's own start-up checks of them (its words)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.engine_checks import VllmStartSettings, check_vllm_start
from kvbudget.capacity.engines.vllm.settings import (
    NO_DEVICE_BATCH_DEFAULTS,
    PROFILE_RUN_SINCE,
    batch_defaults,
    default_mamba_cache_mode,
    mla_backend_block_size,
)
from kvbudget.capacity.kv_checkpoint import vllm_checkpoint_kv
from kvbudget.capacity.layouts.vllm import MambaCacheMode
from kvbudget.capacity.memory import CUDA_CONTEXT_BYTES
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.versions import (
    DEFAULT_VLLM_VERSION,
    VllmBehaviour,
    check_vllm_kv_dtype,
    vllm_behaviour,
)
from kvbudget.capacity.vllm_startup import vllm_total_bytes
from kvbudget.errors import ConfigError, without_kind
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.units import GiB


@dataclass(frozen=True)
class EngineSettings:
    """What every step of the plan reads: the request, the model, the GPU, the engine version's
    behaviour and the batch and memory settings resolved from them (the defaults applied and
    the notes are appended to by the steps, in order)."""

    request: PlanRequest
    model: ModelSpec
    gpu: GpuSpec
    behaviour: VllmBehaviour
    version_text: str
    device_given: bool
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    gpu_memory_utilization: float
    device_total_bytes: int
    defaults: dict[str, str]
    notes: list[str]

    @property
    def profiled(self) -> bool:
        """vLLM profiles a forward pass at start-up (and no --activation-bytes replaces it)."""
        return self.request.activation_bytes is None and self.behaviour.version >= PROFILE_RUN_SINCE


def _batch_settings(
    request: PlanRequest, gpu: GpuSpec, behaviour: VllmBehaviour, device_given: bool,
    defaults: dict[str, str], notes: list[str],
) -> tuple[int, int, float]:  # fmt: skip
    """(max_num_batched_tokens, max_num_seqs, gpu_memory_utilization): given, or the version's
    defaults on this GPU (the CPU build's when no device is given), each default said."""
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
    return t_b, max_seqs, util


def resolve_engine(
    request: PlanRequest, model: ModelSpec, gpu: GpuSpec, max_model_len: int, device_given: bool
) -> EngineSettings:
    """The version's behaviour and the batch and memory settings, with the version's start-up
    checks run on them (vLLM's words) and the device's memory notes."""
    version_text = request.engine_version or DEFAULT_VLLM_VERSION
    behaviour = vllm_behaviour(version_text)
    defaults: dict[str, str] = {}
    notes = list(behaviour.notes)
    if request.engine_version is None:
        defaults["engine_version"] = f"{DEFAULT_VLLM_VERSION} (kvbudget default)"
    t_b, max_seqs, util = _batch_settings(request, gpu, behaviour, device_given, defaults, notes)
    device_total, _note = vllm_total_bytes(gpu)  # the note: memory_notes
    return EngineSettings(
        request, model, gpu, behaviour, version_text, device_given, max_model_len,
        t_b, max_seqs, util, device_total, defaults, notes,
    )  # fmt: skip


def with_checkpoint_kv_dtype(engine: EngineSettings) -> EngineSettings:
    """``--kv-cache-dtype auto`` resolved from a ModelOpt checkpoint's KV quantization as the
    version does (``capacity.kv_checkpoint``): the request then carries that dtype, as if given
    (vLLM resolves it before building its CacheConfig), and the defaults say where it came from;
    a field the version does not take is said in a note."""
    found = vllm_checkpoint_kv(engine.model, engine.request.kv_dtype, engine.behaviour.version)
    if found is None:
        return engine
    if found.name is None:
        engine.notes.append(found.reason)
        return engine
    engine.defaults["kv_dtype"] = found.reason
    return replace(engine, request=engine.request.model_copy(update={"kv_dtype": found.name}))


def checkpoint_kv_refusal(engine: EngineSettings, exc: ConfigError) -> ConfigError:
    """A KV dtype refusal said as the checkpoint's: the user left ``auto``, and
    :func:`with_checkpoint_kv_dtype` took the dtype from the checkpoint's field."""
    source = engine.defaults.get("kv_dtype")
    if exc.field != "kv_dtype" or source is None:
        return exc
    why = without_kind(str(exc)).split(";")[0]
    return ConfigError(
        f"kv_dtype: auto on this checkpoint is {engine.request.kv_dtype} ({source}), which "
        f"kvbudget cannot size here ({why}); pass --kv-cache-dtype bfloat16 or fp8",
        field="kv_dtype",
    )


def resolve_kv_dtype(engine: EngineSettings) -> KvDtype:
    """--kv-cache-dtype (auto follows the dtype --dtype resolved, float32 included), checked
    against the version; then vLLM's own start-up checks of the settings."""
    request = engine.request
    kv_dtype = get_kv_dtype(request.kv_dtype, engine="vllm", model_dtype=engine.model.torch_dtype)
    if request.kv_dtype.strip().lower() != "auto":
        check_vllm_kv_dtype(kv_dtype.name, engine.behaviour.version)
    check_vllm_start(  # vLLM's own start-up checks, in its words (capacity/engine_checks.py)
        VllmStartSettings(
            engine.behaviour.version,
            engine.max_model_len,
            engine.max_num_batched_tokens,
            engine.max_num_seqs,
            engine.gpu_memory_utilization,
            request.block_size,
        )
    )
    return kv_dtype


def resolve_block_size(engine: EngineSettings, kv_dtype: KvDtype) -> int | None:
    """--block-size, or the MLA backend's on this GPU (None: each spec's default)."""
    mla_block = mla_backend_block_size(
        engine.model, engine.gpu, engine.behaviour.version, kv_dtype.name
    )
    if engine.request.block_size is None and mla_block is not None:
        engine.notes.append(
            f"block size {mla_block} for MLA: vLLM {engine.version_text} picks FLASH_ATTN_MLA "
            "first on Hopper and keeps its default 16 (0.19.0 platforms/cuda.py backend "
            "priorities, update_block_size_for_backend); pass --block-size for another backend"
        )
        return mla_block
    return engine.request.block_size


def memory_notes(engine: EngineSettings) -> None:
    """The device's usable total (when estimated) and a utilization above the free memory."""
    device_total, total_note = vllm_total_bytes(engine.gpu)
    if total_note and engine.device_given:
        engine.notes.append(total_note)
    free_at_start = device_total - CUDA_CONTEXT_BYTES
    requested = device_total * engine.gpu_memory_utilization
    if engine.request.kv_cache_memory_bytes is None and requested > free_at_start:
        engine.notes.append(
            f"requested {requested / GiB:.2f} GiB exceeds the free memory at start-up "
            f"(about {free_at_start / GiB:.2f} GiB after a ~0.5 GiB CUDA context, estimate): "
            "vLLM would refuse with 'Free memory on device ... is less than desired GPU memory "
            "utilization'"
        )


def resolve_mamba_mode(engine: EngineSettings) -> MambaCacheMode:
    """--mamba-cache-mode, or the version's default for this model (said when not none)."""
    request = engine.request
    mode = request.mamba_cache_mode or default_mamba_cache_mode(
        engine.model, engine.behaviour.version
    )
    if request.mamba_cache_mode is None and mode != "none":
        engine.defaults["mamba_cache_mode"] = (
            f"{mode} (vLLM {engine.version_text} turns prefix caching on for hybrid models, and "
            "with it mamba cache mode align; --mamba-cache-mode none for --no-enable-prefix-caching)"
        )
    return mode
