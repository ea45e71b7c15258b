"""Validation: calibrate on a restricted series, predict held-out cells, report the errors.

The calibration series is limited to what the *calibration cells* cover (prompts up to the
medium length, batches up to the normal concurrency); then every cell is measured on the
engine and predicted from the profile (on the llama.cpp slot engine, or for a profile measured
on vLLM on the paged engine). Cells at peak concurrency and with long inputs are
*held out*: the fit never saw batches that large or prompts that long, and the profile's
range warnings say so. Measured figures come from the client clock (TTFT = first streamed
token - send; TPOT = (last token - first token) / (tokens - 1); throughput = output tokens /
(last token - first send)).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from kvbudget.calibrate.engine import EngineInfo, discover, is_own_simulator, poll_slot_cells
from kvbudget.calibrate.measure import token_request
from kvbudget.calibrate.predict import (
    CellFigures,
    CellLoad,
    ErrorRow,
    compare,
    figures,
    predict_cell,
)
from kvbudget.calibrate.predict_paged import is_paged_profile, predict_paged_cell
from kvbudget.calibrate.run import CalibrateOptions, calibrate
from kvbudget.calibrate.series import token_range
from kvbudget.engine_name import LLAMACPP, is_engine
from kvbudget.errors import RunFailedError, TargetError
from kvbudget.load.client import OpenAIClient
from kvbudget.load.diagnosis import Failure, stopped_line
from kvbudget.records import at_one_instant
from kvbudget.sim.timing import CalibrationProfile

TARGET_REL_ERROR = 0.20


@dataclass(frozen=True, slots=True)
class CellPlan:
    cell_id: str
    role: Literal["calibration", "held-out"]
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    num_requests: int


def default_cells(info: EngineInfo, *, output_tokens: int = 32, scale: int = 1) -> list[CellPlan]:
    """short/medium/long inputs (1/16, 1/4, 3/4 of a slot) x single/normal/peak concurrency
    (1, half the slots, twice the slots); calibration on single and normal with short and
    medium inputs, held out: the peak cells and the long inputs."""
    ctx = info.max_prompt_tokens
    slots = info.num_slots or 4
    short, medium, long_ = ctx // 16, ctx // 4, (ctx * 3) // 4 - output_tokens
    normal, peak = max(2, slots // 2), 2 * slots
    n = max(1, scale)
    return [
        CellPlan("short/single", "calibration", short, output_tokens, 1, 4 * n),
        CellPlan("short/normal", "calibration", short, output_tokens, normal, 2 * normal * n),
        CellPlan("medium/normal", "calibration", medium, output_tokens, normal, 2 * normal * n),
        CellPlan("short/peak", "held-out", short, output_tokens, peak, 2 * peak * n),
        CellPlan("long/single", "held-out", long_, output_tokens, 1, 3 * n),
        CellPlan("long/peak", "held-out", long_, output_tokens, peak, peak * n),
    ]


def cell_load(plan: CellPlan, seed: int, vocab_size: int | None = None) -> CellLoad:
    rng = np.random.default_rng(seed)
    low, high = token_range(vocab_size)
    prompts = tuple(
        tuple(int(t) for t in rng.integers(low, high, size=plan.prompt_tokens))
        for _ in range(plan.num_requests)
    )
    return CellLoad(plan.cell_id, prompts, plan.output_tokens, plan.concurrency)


async def measure_cell(
    client: OpenAIClient,
    model: str,
    load: CellLoad,
    engine_label: str,
    *,
    total_cells: int | None = None,
    kind: str = "measured",
) -> tuple[CellFigures, list[str]]:
    """Closed loop: ``concurrency`` workers, each sends its next prompt when one ends. With
    ``total_cells`` (llama.cpp), the peak KV usage is sampled from ``/slots`` meanwhile.

    Returns the figures and the measurement's warnings. A request whose tokens all reached the
    client at one instant (the client was not scheduled while the engine streamed them, or the
    server sent them in one burst) has no observable TPOT: it is left out of the TPOT sample,
    not counted as 0 s, and the warning says how many were left out."""
    todo = list(enumerate(load.prompts))
    outs = []
    stop = asyncio.Event()
    poller = asyncio.create_task(poll_slot_cells(client, stop)) if total_cells else None

    async def worker() -> None:
        while todo:
            i, prompt = todo.pop(0)
            req = token_request(f"{load.cell_id}-{i}", model, prompt, load.output_tokens)
            outs.append(await client.stream(req))

    try:
        await asyncio.gather(*(worker() for _ in range(load.concurrency)))
    finally:
        stop.set()
    peak_cells = await poller if poller is not None else None
    peak_kv = peak_cells / total_cells if peak_cells is not None and total_cells else None
    bad = [o for o in outs if o.status != "ok"]
    if bad:
        raise RunFailedError(
            "cell "
            + load.cell_id
            + ": "
            + stopped_line(
                [Failure(o.error_kind, o.http_status, o.error_excerpt) for o in bad],
                num_sent=len(outs),
                url=client.base_url,
            )
        )
    ttfts, tpots, total, starts, ends = [], [], 0, [], []
    num_unobserved = 0
    for o in outs:
        times = o.token_times_s()
        if o.sent_s is None or not times:
            raise TargetError(
                f"cell {load.cell_id}: request {o.request_id} streamed no token; check that "
                "the server honours max_tokens and ignore_eos"
            )
        ttfts.append(times[0] - o.sent_s)
        if at_one_instant(times):
            num_unobserved += 1
        elif len(times) >= 2:
            tpots.append((times[-1] - times[0]) / (len(times) - 1))
        total += len(times)
        starts.append(o.sent_s)
        ends.append(times[-1])
    warnings = []
    if num_unobserved:
        warnings.append(
            f"{load.cell_id}: {num_unobserved} of {len(outs)} requests delivered every token "
            "to the client at one instant, so their TPOT is not observable and is left out"
            + ("" if tpots else "; the cell has no measured TPOT")
            + " (run the client where it is not starved of CPU by the engine)"
        )
    cell = figures(
        f"{kind} ({engine_label})", ttfts, tpots, total, max(ends) - min(starts), peak_kv
    )
    return cell, warnings


class CellResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cell_id: str
    role: str
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    num_requests: int
    measured: CellFigures
    predicted: CellFigures
    warnings: list[str]


class ValidationReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = "kvbudget.calibration-validation"
    #: what the "measured" figures are: ``simulated`` against kvbudget serve (its step times
    #: are the simulator's, delivered in real time), else ``measured``
    source: Literal["measured", "simulated"] = "measured"
    engine: str
    hardware: str
    profile: CalibrationProfile
    cells: list[CellResult]
    errors: list[ErrorRow]
    #: largest |relative error| of TTFT p50 / TPOT p50 over the held-out cells
    held_out_max_abs_rel_error: dict[str, float]
    target_rel_error: float = TARGET_REL_ERROR
    target_met: bool
    calibration_wall_s: float
    validation_wall_s: float


async def validate(
    opts: CalibrateOptions, *, output_tokens: int = 32, scale: int = 1
) -> ValidationReport:
    """Calibrate on the calibration cells' ranges, then measure and predict every cell."""
    start = time.perf_counter()
    async with OpenAIClient(
        opts.base_url, concurrency=4, timeout_s=30, api_key=opts.api_key
    ) as probe_client:
        info = await discover(probe_client, opts.model, opts.metrics_url)
    plans = default_cells(info, output_tokens=output_tokens, scale=scale)
    train = [p for p in plans if p.role == "calibration"]
    limited = replace(
        opts,
        max_prompt_tokens=max(p.prompt_tokens + p.output_tokens for p in train),
        max_batch=max(p.concurrency for p in train),
    )
    cal = await calibrate(limited)
    profile = cal.profile
    cells: list[CellResult] = []
    rows: list[ErrorRow] = []
    label = f"{cal.info.engine} {cal.info.version}, {profile.hardware}"
    source: Literal["measured", "simulated"] = (
        "simulated" if is_own_simulator(cal.info.engine) else "measured"
    )
    slots, ctx = cal.info.num_slots, cal.info.n_ctx_slot
    slot_cells = slots * ctx if is_engine(cal.info.engine, LLAMACPP) and slots and ctx else None
    async with OpenAIClient(
        opts.base_url,
        concurrency=max(p.concurrency for p in plans) + 1,  # + the /slots poller
        timeout_s=opts.request_timeout_s,
        api_key=opts.api_key,
        force_close=True,  # llama.cpp closes every connection after a streamed response
    ) as client:
        for k, plan in enumerate(plans):
            load = cell_load(plan, opts.seed + 1000 + k, cal.info.vocab_size)
            measured, measure_warnings = await measure_cell(
                client, opts.model, load, label, total_cells=slot_cells, kind=source
            )
            predict = predict_paged_cell if is_paged_profile(profile) else predict_cell
            predicted, predict_warnings = predict(profile, load)
            cells.append(
                CellResult(
                    cell_id=plan.cell_id,
                    role=plan.role,
                    prompt_tokens=plan.prompt_tokens,
                    output_tokens=plan.output_tokens,
                    concurrency=plan.concurrency,
                    num_requests=plan.num_requests,
                    measured=measured,
                    predicted=predicted,
                    warnings=measure_warnings + predict_warnings,
                )
            )
            rows.extend(compare(plan.cell_id, plan.role, measured, predicted))
    worst: dict[str, float] = {}
    for metric in ("ttft_p50_s", "tpot_p50_s"):
        errs = [
            abs(r.rel_error)
            for r in rows
            if r.role == "held-out" and r.metric == metric and r.rel_error is not None
        ]
        worst[metric] = max(errs) if errs else float("nan")
    met = all(v <= TARGET_REL_ERROR for v in worst.values())
    return ValidationReport(
        source=source,
        engine=f"{cal.info.engine} {cal.info.version}",
        hardware=profile.hardware,
        profile=profile,
        cells=cells,
        errors=rows,
        held_out_max_abs_rel_error=worst,
        target_met=met,
        calibration_wall_s=cal.wall_s,
        validation_wall_s=time.perf_counter() - start,
    )
