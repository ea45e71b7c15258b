"""A kvbudget workload on the llama.cpp slot engine, as ``RequestRecord``s (simulated)."""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.records import RequestRecord
from kvbudget.records.simulated import Ended, ended_as, simulated_record
from kvbudget.sim.slots import SlotConfig, SlotEngine, SlotRequest, SlotRequestResult, SlotStats
from kvbudget.sim.slots_replica import run_slots
from kvbudget.sim.timing import StepTimeModel
from kvbudget.workload.request import PlannedRequest


def run_planned(
    config: SlotConfig,
    timing: StepTimeModel,
    planned: Sequence[PlannedRequest],
    *,
    concurrency: int | None = None,
    turnaround_s: float = 0.0,
    stagger_s: float = 0.0,
    replica: str = "llamacpp-0",
    engine: SlotEngine | None = None,
    start_s: float = 0.0,
) -> tuple[list[RequestRecord], SlotStats]:
    """A kvbudget workload (``PlannedRequest``) on the slot engine: one ``RequestRecord``
    (``source="simulated"``) per request. ``cache_salt`` is ignored (llama.cpp has none); a
    refused prompt is an ``http_status`` 400 error, as llama.cpp answers it; a request whose
    client cancels it after ``cancel_after_tokens`` outputs stops there and is ``cancelled``
    (:func:`kvbudget.records.simulated.ended_as`'s rule). ``engine`` and
    ``start_s`` continue an idle engine (see :func:`~kvbudget.sim.slots_replica.run_slots`)."""
    limits = [_output_limit(p) for p in planned]
    reqs = [
        SlotRequest(p.request_id, p.arrival_s, p.prompt_token_ids, limit)
        for p, limit in zip(planned, limits, strict=True)
    ]
    results, stats = run_slots(
        config,
        timing,
        reqs,
        concurrency=concurrency,
        turnaround_s=turnaround_s,
        stagger_s=stagger_s,
        engine=engine,
        start_s=start_s,
    )
    records = [
        simulated_record(
            res.request_id,
            _ended(res, limit, plan.output_tokens),
            # llama.cpp stops a request at its n_predict (or its slot's context): "length"
            finish_reason="length",
            error=res.error,
            http_status=400,  # llama.cpp's answer to a prompt that fits no slot
            cell_id=plan.cell_id,
            tenant=plan.tenant,
            replica=replica,
            session_id=plan.session_id,
            scheduled_s=plan.arrival_s,
            sent_s=res.arrival_s,
            first_token_s=res.first_token_s,
            done_s=res.done_s,
            token_times_s=res.token_times_s,
            prompt_tokens=res.prompt_tokens,
            output_tokens=res.output_tokens,
            cached_tokens=res.cached_tokens,
            queue_s=None if res.start_s is None else res.start_s - res.arrival_s,
        )
        for plan, res, limit in zip(planned, results, limits, strict=True)
    ]
    return records, stats


def _ended(res: SlotRequestResult, limit: int, asked: int) -> Ended:
    """How a slot-engine request ended, by the one rule (:func:`ended_as`): refused, cancelled
    by its client after its last token (``limit`` below the ``asked`` output), or finished."""
    if res.status != "ok":
        return ended_as("error", None)
    if limit < asked and res.output_tokens >= limit:
        return ended_as("aborted", "cancelled")
    return ended_as("finished", "length")


def _output_limit(plan: PlannedRequest) -> int:
    """Outputs after which the request ends: its length, or the client's cancellation (as
    :attr:`kvbudget.sim.request.SimRequest.output_limit`)."""
    cancel = plan.cancel_after_tokens
    limit = plan.output_tokens
    return limit if cancel is None or cancel >= limit else max(1, cancel)
