"""``kvbudget calibrate``: measure the series, fit, write the profile (with ``--gpu``: and the
measured model's correction, :mod:`kvbudget.sim.measured_correction`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kvbudget.calibrate.engine import EngineInfo, describe_hardware, discover
from kvbudget.calibrate.fit import FitResult, Observation, fit_step_model
from kvbudget.calibrate.measure import ProbeResult, observations, request_overhead_s, run_series
from kvbudget.calibrate.series import SeriesSpec, plan_series
from kvbudget.engine_name import VLLM, is_engine
from kvbudget.errors import ConfigError
from kvbudget.load.client import OpenAIClient
from kvbudget.sim.timing import CalibrationProfile, StepTimeModel


@dataclass(frozen=True, slots=True)
class CalibrateOptions:
    base_url: str
    model: str
    metrics_url: str | None = None
    api_key: str | None = None
    name: str = ""
    hardware: str = ""
    engine_flags: tuple[str, ...] = ()
    repeats: int = 3
    decode_tokens: int = 32
    #: limits of the series (None: what the engine allows); validation lowers them
    max_prompt_tokens: int | None = None
    max_batch: int | None = None
    n_ubatch: int | None = None
    n_batch: int | None = None
    seed: int = 0
    request_timeout_s: float = 300.0
    deadline_s: float = 600.0
    #: GPU catalog id and tensor-parallel size of the engine: correct the measured model
    #: (aiconfigurator-core) by this run and store the factors in the profile
    gpu: str | None = None
    tp: int = 1


@dataclass(frozen=True, slots=True)
class Calibration:
    profile: CalibrationProfile
    info: EngineInfo
    observations: list[Observation]
    fit: FitResult
    results: list[ProbeResult]
    wall_s: float


def series_spec(opts: CalibrateOptions, info: EngineInfo) -> SeriesSpec:
    room = info.max_prompt_tokens - opts.decode_tokens - 8
    top = room if opts.max_prompt_tokens is None else min(room, opts.max_prompt_tokens)
    batch = opts.max_batch or info.num_slots or 4
    return SeriesSpec(
        max_prompt_tokens=top,
        max_batch=batch,
        decode_tokens=opts.decode_tokens,
        repeats=opts.repeats,
        seed=opts.seed,
        vocab_size=info.vocab_size,
    )


async def calibrate(opts: CalibrateOptions) -> Calibration:
    start = time.perf_counter()
    async with OpenAIClient(
        opts.base_url,
        concurrency=32,
        timeout_s=opts.request_timeout_s,
        api_key=opts.api_key,
        force_close=True,  # llama.cpp closes every connection after a streamed response
    ) as client:
        info = await discover(client, opts.model, opts.metrics_url)
        if opts.n_batch:
            info.settings["n_batch"] = opts.n_batch
        if opts.n_ubatch:
            key = "max_num_batched_tokens" if is_engine(info.engine, VLLM) else "n_ubatch"
            info.settings[key] = opts.n_ubatch
        # the measured model to correct, built before the series so a refusal costs no run
        measured = measured_model(opts, info) if opts.gpu else None
        spec = series_spec(opts, info)
        probes = plan_series(spec)
        results = await run_series(
            client, opts.model, probes, deadline_s=opts.deadline_s, metrics_url=opts.metrics_url
        )
    # tokens one step computes: llama.cpp's -ub, vLLM's --max-num-batched-tokens
    step = info.settings.get("n_ubatch") or info.settings.get("max_num_batched_tokens")
    n_ubatch = int(step or opts.n_ubatch or 512)
    obs = observations(results, n_ubatch=n_ubatch)
    try:
        fit = fit_step_model(obs)
    except ConfigError as exc:
        why = missing_decode_points(results, obs)
        if why is None:
            raise
        raise ConfigError(f"{exc}; {why}", field=exc.field) from None
    profile = build_profile(opts, info, obs, fit, request_overhead_s(results))
    if measured is not None:
        from kvbudget.sim.measured_correction import derive_correction

        correction = derive_correction(
            measured, profile, measured_model=measured.name, step=n_ubatch
        )
        profile = profile.model_copy(update={"measured_correction": correction})
    return Calibration(profile, info, obs, fit, results, time.perf_counter() - start)


def measured_model(opts: CalibrateOptions, info: EngineInfo) -> StepTimeModel:
    """The measured model (aiconfigurator-core's tables) of the calibrated vLLM engine: its
    model (``--model``: a catalog id, Hugging Face id or config path), ``--gpu``, ``--tp`` and
    the version the engine reports; a one-line ConfigError when it cannot be built."""
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.sim.fromplan import build_replica

    if not is_engine(info.engine, "vllm"):
        raise ConfigError(
            f"--gpu: the measured model prices vLLM engines only; this engine is {info.engine}; "
            "drop --gpu",
            field="gpu",
        )
    request = PlanRequest(
        model=opts.model,
        gpu=opts.gpu,
        tp=opts.tp,
        engine_version=info.version or None,
        max_model_len=info.max_model_len,
    )
    return build_replica(request, timing_model="measured").timing


def missing_decode_points(results: list[ProbeResult], obs: list[Observation]) -> str | None:
    """Why decode probes gave no fit point, when some did not (else ``None``)."""
    num_probes = sum(1 for r in results if r.probe.kind == "decode")
    num_points = sum(1 for o in obs if o.kind == "decode")
    if num_points >= num_probes:
        return None
    return (
        f"{num_probes - num_points} of {num_probes} decode probes gave no point (on the "
        "client clock their tokens reached the client at one instant, or fewer than 2 "
        "streamed): run the client where the engine does not starve it of CPU, or give "
        "--metrics-url so the engine's own timings are used"
    )


def build_profile(
    opts: CalibrateOptions,
    info: EngineInfo,
    obs: list[Observation],
    fit: FitResult,
    overhead_s: float,
) -> CalibrationProfile:
    prefill_points = [
        (int(o.prefill_tokens), o.seconds)
        for o in obs
        if o.kind == "prefill" and o.prompt_tokens == o.prefill_tokens
    ]
    decode_points = [
        (o.batch_size, int(o.batch_size * o.context_tokens), o.seconds / o.num_steps)
        for o in obs
        if o.kind == "decode"
    ]
    if len(prefill_points) < 3 or len(decode_points) < 3:
        raise ConfigError(
            f"calibration: {len(prefill_points)} cold prefill and {len(decode_points)} decode "
            "points measured, needs 3 of each; raise --repeats",
            field="repeats",
        )
    sources = sorted({o.source for o in obs})
    return CalibrationProfile(
        name=opts.name or f"{info.engine}-{_short(opts.model)}",
        model_id=opts.model,
        gpu=opts.hardware or describe_hardware(opts.base_url),
        engine=f"{info.engine} {info.version}",
        prefill_points=prefill_points,
        decode_points=decode_points,
        fit=fit.fit,
        engine_version=info.version,
        engine_flags=list(opts.engine_flags),
        hardware=opts.hardware or describe_hardware(opts.base_url),
        engine_settings={**info.settings, "timings_source": "+".join(sources)},
        request_overhead_s=overhead_s,
        residuals=fit.residuals,
        valid_ranges=fit.valid_ranges,
    )


def _short(model: str) -> str:
    tail = model.rstrip("/").rsplit("/", 1)[-1]
    return tail[:-5] if tail.endswith(".gguf") else tail
