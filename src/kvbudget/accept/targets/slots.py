"""``kvbudget accept`` predictions on the llama.cpp slot engine (``target.profile`` from llama.cpp).

When the calibrated profile was measured on llama.cpp, its cells are predicted the way
llama.cpp schedules them (:mod:`kvbudget.sim.slots`: ``-np`` slots of ``n_ctx_slot`` cells,
``n_batch``/``n_ubatch`` from the profile's ``engine_settings``), not by the vLLM-style paged
engine. Three choices make the prediction comparable with the measured cell:

* **The same requests.** Only the requests the measured cell actually sent are replayed (a
  closed-loop cell stops sending at its duration), with their output lengths and the measured
  run's closed-loop concurrency.
* **The server's prompt lengths.** llama.cpp tokenizes kvbudget's synthetic prompt text with the
  model's own tokenizer, which counts it differently from kvbudget's tokenizer (on the test
  suite's tiny model, Llama-3 vocabulary, the server counted 2.4-2.9 times the tier's
  planned midpoint). Each prompt is therefore
  resized to the ``usage.prompt_tokens`` the server reported for that request
  (:func:`fit_prompt_lengths`): stretched by the cell's median ratio, so that prompts sharing a
  prefix still share its (stretched) prefix, then cut or padded with tokens of its own to the
  exact count. Requests without a reported count get the cell's ratio alone.
* **Client overheads.** The profile's ``request_overhead_s`` is the closed-loop turnaround and
  is added to every TTFT and end-to-end latency, as in ``kvbudget calibrate --validate``.

One slot engine serves the whole run, cell after cell, so idle slots keep their prompts across
cells as the real server's do (a shared system prompt is reused by the next cell); the warm-up is
not replayed. Cancellation after ``cancel_after_tokens`` is a shorter output, recorded as
``cancelled`` as the measured run records it (:mod:`kvbudget.sim.slots_records`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from kvbudget.accept.targets.base import CellRun, TargetInfo
from kvbudget.calibrate.predict import CLIENT_STAGGER_S, slot_config
from kvbudget.engine_name import LLAMACPP, is_engine
from kvbudget.records import MetricSample, RequestRecord
from kvbudget.sim.slots import SlotEngine
from kvbudget.sim.slots_records import run_planned
from kvbudget.sim.timing import CalibratedTiming, CalibrationProfile
from kvbudget.workload.request import PlannedRequest

#: filler tokens (padding a prompt to the server's count) live far from real and generated ids
_FILLER_BASE = -(2**40)
_FILLER_STRIDE = 2**24


def is_llamacpp_profile(profile: CalibrationProfile) -> bool:
    """A profile measured on llama.cpp (``kvbudget calibrate`` writes ``engine = "llama.cpp <ver>"``)."""
    return is_engine(profile.engine, LLAMACPP)


def engine_behaviour(profile: CalibrationProfile) -> str:
    """The engine behaviour profile the predictions use, with its slot settings."""
    cfg = slot_config(profile)
    return (
        f"llama.cpp slots ({cfg.num_slots} x {cfg.n_ctx_slot} cells, n_batch {cfg.n_batch}, "
        f"n_ubatch {cfg.n_ubatch})"
    )


def fit_prompt_lengths(
    requests: Sequence[PlannedRequest], served_tokens: Mapping[str, int]
) -> list[PlannedRequest]:
    """Resize each prompt to the server's token count for it (``served_tokens[request_id]``).

    With ``r`` the median of ``served / planned`` over the requests the server counted, position
    ``i`` of the stretched prompt is planned token ``floor(i / r)`` (so equal planned prefixes
    stay equal); then the prompt is cut, or padded with tokens unique to the request, to the
    served count (or to ``round(planned * r)`` when the server gave none)."""
    ratios = [
        served_tokens[r.request_id] / r.prompt_tokens
        for r in requests
        if r.request_id in served_tokens and r.prompt_tokens > 0
    ]
    if not ratios:
        return list(requests)
    ratio = float(np.median(ratios))
    out: list[PlannedRequest] = []
    for index, req in enumerate(requests):
        planned = req.prompt_tokens
        want = served_tokens.get(req.request_id, max(1, round(planned * ratio)))
        if planned == 0 or (want == planned and ratio == 1.0):
            out.append(req)
            continue
        stretched_len = min(want, round(planned * ratio))
        ids = [req.prompt_token_ids[min(int(i / ratio), planned - 1)] for i in range(stretched_len)]
        base = _FILLER_BASE - index * _FILLER_STRIDE
        ids += [base - j for j in range(want - stretched_len)]
        shared = min(want, round(req.shared_prefix_tokens * ratio))
        out.append(replace(req, prompt_token_ids=tuple(ids), shared_prefix_tokens=shared))
    return out


class SlotsPredictionTarget:
    """Replays a measured acceptance run's cells on the llama.cpp slot engine (simulated)."""

    def __init__(
        self,
        profile: CalibrationProfile,
        measured: Mapping[str, RequestRecord],
    ) -> None:
        self.profile = profile
        self.timing = CalibratedTiming(profile)
        self.config = slot_config(profile)
        self.measured = measured
        self.behaviour = engine_behaviour(profile)
        self.engine = SlotEngine(self.config, self.timing)
        self._clock_s = 0.0  # simulated time at which the previous cell ended
        #: cell id -> the profile's out-of-range warnings for that cell
        self.warnings: dict[str, list[str]] = {}
        label = f"{self.timing.name}; engine behaviour: {self.behaviour}"
        self._info = TargetInfo(
            kind="sim",
            source="simulated",
            label=label,
            timing_model=label,
            # same request ids and quality prompts as the measured run; outputs are not judged
            synthetic_text=False,
        )

    @property
    def info(self) -> TargetInfo:
        return self._info

    def idle_baseline(self) -> dict[str, float]:
        return {"kv_usage": 0.0, "num_running": 0.0, "num_waiting": 0.0}

    def close(self) -> None:
        return None

    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
    ) -> CellRun:
        if warmup:  # not replayed: the measured warm-up's prompt lengths are not recorded
            return CellRun(records=[], duration_s=0.0)
        sent = [r for r in requests if r.request_id in self.measured]
        todo = sent or list(requests)
        served = {
            r.request_id: int(rec.prompt_tokens)
            for r in todo
            if (rec := self.measured.get(r.request_id)) is not None
            and rec.prompt_tokens is not None
            and rec.prompt_tokens > 0
        }
        todo = [replace(r, cell_id=r.cell_id or cell_id) for r in fit_prompt_lengths(todo, served)]
        overhead = self.profile.request_overhead_s
        records, stats = run_planned(
            self.config,
            self.timing,
            todo,
            concurrency=closed_loop_concurrency,
            turnaround_s=overhead if closed_loop_concurrency is not None else 0.0,
            stagger_s=CLIENT_STAGGER_S if closed_loop_concurrency is not None else 0.0,
            engine=self.engine,
            start_s=self._clock_s,
        )
        records = [_with_overhead(rec, overhead) for rec in records]
        refused = [r for r in records if r.status != "ok"]
        longest = max((r.prompt_tokens for r in todo), default=0)
        out_max = max(
            (min(r.output_tokens, r.cancel_after_tokens or r.output_tokens) for r in todo),
            default=1,
        )
        batch = min(closed_loop_concurrency or len(todo), self.config.num_slots)
        self.warnings[cell_id] = self.profile.range_warnings(
            {
                "prompt_tokens": float(longest),
                "context_tokens": float(longest + max(out_max - 1, 0)),
                "batch_size": float(batch),
            }
        )
        start_s = self._clock_s
        end_s = max((r.done_s or start_s for r in records), default=start_s)
        self._clock_s = end_s
        prompt = sum(r.prompt_tokens or 0 for r in records if r.status == "ok")
        cached = sum(r.cached_tokens or 0 for r in records if r.status == "ok")
        return CellRun(
            records=records,
            duration_s=end_s - start_s,
            samples=[MetricSample(timestamp_s=end_s, name="kv_usage", value=stats.peak_kv_usage)],
            capacity_error=refused[0].error_excerpt if refused else None,
            counters={
                "prefix_queries_tokens": float(prompt),
                "prefix_hits_tokens": float(cached),
                "preemptions": 0.0,
            },
            kv_usage_after_drain=0.0,
        )


def _with_overhead(rec: RequestRecord, overhead_s: float) -> RequestRecord:
    if rec.status == "error" or not overhead_s:  # a cancelled request waited as long
        return rec
    update: dict[str, float] = {}
    if rec.ttft_s is not None:
        update["ttft_s"] = rec.ttft_s + overhead_s
    if rec.e2e_s is not None:
        update["e2e_s"] = rec.e2e_s + overhead_s
    return rec.model_copy(update=update)
