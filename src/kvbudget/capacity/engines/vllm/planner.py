"""vLLM's plan of one replica: settings (``start``) -> groups (``groups``) -> per-stage memory
and blocks (``stages``) -> ``num_blocks`` (min over pipeline stages) -> the start-up log lines,
the concurrency figure and the fit check, each as the requested engine version computes them."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity import pool as vpool
from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.engines.vllm.groups import vllm_groups
from kvbudget.capacity.engines.vllm.stages import (
    common_blocks,
    plan_stages,
    sampler_after_capture,
    stage_layers,
)
from kvbudget.capacity.engines.vllm.start import (
    EngineSettings,
    checkpoint_kv_refusal,
    memory_notes,
    resolve_block_size,
    resolve_engine,
    resolve_kv_dtype,
    resolve_mamba_mode,
    with_checkpoint_kv_dtype,
)
from kvbudget.capacity.layouts.vllm import MambaCacheMode
from kvbudget.capacity.layouts.vllm_dots3 import dots3_has_dsa, is_dots3_note
from kvbudget.capacity.memory import RankMemory
from kvbudget.capacity.mtp_dots3 import dots3_mtp
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.pool_dots3 import check_dots3_device
from kvbudget.capacity.remedies import fit_remedies
from kvbudget.capacity.versions import Version, vllm_async_scheduling, vllm_concurrent_batches
from kvbudget.capacity.vllm_startup import max_len_refusal
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.model import ModelSpec


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


@dataclass(frozen=True)
class _Fit:
    """Whether ``max_model_len`` fits the tightest stage, in the version's words if not."""

    fits: bool
    needed_bytes: int
    error: str | None
    estimated_max_model_len: int | None
    remedies: tuple[str, ...]


def _fit(
    engine: EngineSettings,
    weights: WeightsEstimate,
    kv_dtype: KvDtype,
    groups: list[vpool.KvCacheGroup],
    tightest: RankMemory,
    in_flight: int,
    mode: MambaCacheMode,
    num_blocks: int,
    draft_block_bytes: int,
    refusal: str | None,
    rank_layers: range | None = None,
) -> _Fit:
    """vLLM's check that one request of ``max_model_len`` fits (its error text and estimate
    when not), the knobs that would make it fit, and a refusal's words over all of it;
    ``rank_layers``: ``tightest``'s layers, its groups projected onto them (Qwen4-Exp's)."""
    request, behaviour, max_model_len = engine.request, engine.behaviour, engine.max_model_len
    per_layer = behaviour.error_style == "v09"  # ~v0.9 summed real layers (no padding)
    needed = vpool.needed_bytes(
        groups, max_model_len, in_flight, mode, per_layer=per_layer, rank_layers=rank_layers
    )
    if draft_block_bytes and groups:
        needed += draft_block_bytes * -(-max_model_len // groups[0].block_size)
    error: str | None = None
    estimated: int | None = None
    fits = True
    if groups and (tightest.available_kv_bytes <= 0 or needed > tightest.available_kv_bytes):
        fits = False
        avail = max(0, tightest.available_kv_bytes)
        estimated = vpool.estimate_max_model_len(
            avail, groups, max_model_len, in_flight, mode, per_layer=per_layer,
            rank_layers=rank_layers,
        )  # fmt: skip
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
    return _Fit(fits, needed, error, estimated, remedies)


def make_vllm_plan(
    request: PlanRequest,
    model: ModelSpec,
    gpu: GpuSpec,
    weights: WeightsEstimate,
    max_model_len: int,
    device_given: bool = True,
    draft_block_bytes: int = 0,
) -> PlanResult:
    """vLLM's plan of one replica, in the order vLLM starts: settings, the KV cache groups,
    each stage's memory and blocks, the common block count, the fit check and the log lines.

    ``draft_block_bytes``: KV bytes a draft model adds to each block of the last stage."""
    refusal = max_len_refusal(model, max_model_len, request.allow_long_max_model_len)
    engine = with_checkpoint_kv_dtype(
        resolve_engine(request, model, gpu, max_model_len, device_given)
    )
    request, notes, behaviour = engine.request, engine.notes, engine.behaviour
    kv_dtype = resolve_kv_dtype(engine)
    block_size = resolve_block_size(engine, kv_dtype)
    memory_notes(engine)
    mode = resolve_mamba_mode(engine)
    if is_dots3_note(model):
        has_dsa = dots3_has_dsa(model, dots3_mtp(request.speculative_config, model).layer_types)
        check_dots3_device(gpu.compute_capability_major, has_dsa=has_dsa)
    try:
        kv_dtype, all_specs, groups = vllm_groups(
            request, model, behaviour, engine.version_text, kv_dtype, block_size, mode, notes
        )
    except ConfigError as exc:
        raise checkpoint_kv_refusal(engine, exc) from None
    stages = plan_stages(engine, weights, all_specs, groups, draft_block_bytes, refusal)
    num_blocks, ranks = common_blocks(engine, stages.ranks, groups)
    refusal = stages.refusal
    if refusal is None:
        refusal = sampler_after_capture(engine, ranks[-1])
    t_b = engine.max_num_batched_tokens
    in_flight = t_b * _concurrent_batches(request, behaviour.version, device_given, groups, notes)
    conc = vpool.max_concurrency(behaviour, num_blocks, groups, max_model_len, in_flight, mode)
    tokens = vpool.kv_cache_tokens(behaviour, num_blocks, groups, conc, max_model_len)
    tightest = min(ranks, key=lambda r: r.available_kv_bytes)
    stage: range | None = None
    if request.pp > 1 and groups and all(g.layer_page_bytes for g in groups):
        # vLLM 0.32 checks each worker on its projected groups (v1/core/kv_cache_utils.py lines
        # 2638-2647): the stage whose memory is shortest of its own need
        def short_of(r: RankMemory) -> int:
            layers = stage_layers(model.num_layers, groups, r.pp_rank, request.pp)
            need = vpool.needed_bytes(groups, max_model_len, in_flight, mode, rank_layers=layers)
            return need - r.available_kv_bytes

        tightest = max(ranks, key=short_of)
        stage = stage_layers(model.num_layers, groups, tightest.pp_rank, request.pp)
    fit = _fit(
        engine, weights, kv_dtype, groups, tightest, in_flight, mode, num_blocks,
        draft_block_bytes, refusal, stage,
    )  # fmt: skip
    if request.pp > 1 and stage is not None:
        notes.append(
            "fit check per stage on the whole model's groups projected onto its layers, as "
            "vLLM 0.32 checks each worker (v1/core/kv_cache_utils.py lines 2638-2647)"
        )
    elif request.pp > 1:
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
        engine_version=engine.version_text,
        gpu=gpu,
        tp=request.tp,
        pp=request.pp,
        kv_dtype=kv_dtype.name,
        max_model_len=max_model_len,
        max_num_batched_tokens=t_b,
        max_in_flight_tokens=in_flight,
        max_num_seqs=engine.max_num_seqs,
        # a QSA ring's block is its capacity, not the cache block (Qwen4-Exp)
        block_size=min(
            (g.block_size for g in groups if g.kind != "ring"), default=request.block_size or 16
        ),
        groups=tuple(groups),
        group_size=vpool.group_size_on(groups),
        num_padding_layers=sum(g.num_padding_layers for g in groups),
        page_size_bytes=groups[0].page_size_bytes if groups else 0,
        num_blocks=num_blocks,
        num_usable_blocks=max(0, num_blocks - 1),
        kv_cache_tokens=tokens,
        max_concurrency=conc,
        available_kv_bytes=tightest.available_kv_bytes,
        fits=fit.fits,
        needed_bytes=fit.needed_bytes,
        estimated_max_model_len=fit.estimated_max_model_len,
        error=fit.error,
        log_lines=lines,
        kv_bytes_per_token_per_rank=stages.per_token_rank,
        kv_bytes_per_token_replica=stages.per_token_replica,
        weights=weights,
        ranks=tuple(ranks),
        mamba_cache_mode=mode,
        notes=tuple(notes) + weights.notes,
        remedies=fit.remedies,
        headroom_fraction=request.headroom_fraction,
        defaults_applied=engine.defaults,
        device_given=device_given,
    )
