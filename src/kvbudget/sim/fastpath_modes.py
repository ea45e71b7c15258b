"""Explicit mode of the fast path: ``EngineCore`` steps while a request reloads from a KV tier.

A request reloading from a tier stays in the running list unscheduled; once loaded it prefills
ahead of the decoders admitted after it and, in running order, takes the token budget first.
The lazy step schedules decoders first, so while that lasts the fast path hands its running
requests to ``EngineCore``'s scheduler (:func:`to_explicit`), steps ``EngineCore``
(:func:`explicit_step`, the explicit replica's step too) and takes them back (:func:`to_lazy`)
once no request reloads and none prefills ahead of a decoder (:func:`lazy_ok`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.sim.engine import EngineCore, StepResult

if TYPE_CHECKING:
    from kvbudget.sim.fastpath import FastEngine


def to_explicit(fe: FastEngine) -> None:
    """Hand the running requests to ``EngineCore``'s scheduler, in running order.

    A reloading request stays in the running list unscheduled and, once loaded, prefills
    ahead of the decoders admitted after it (it takes the token budget first), which the
    lazy step (decoders first) does not model; ``EngineCore`` steps until that is over.
    """
    for req in fe.running.values():
        if req.lazy_g0 >= 0:
            fe._remove_decoder(req)  # its counters and token times, up to date
    fe.sched.running = list(fe.running.values())
    fe.running.clear()
    fe.explicit.clear()
    fe.fresh.clear()
    fe._finish_heap.clear()
    fe._loading = False
    fe._disorder = False
    fe.explicit_mode = True


def lazy_ok(fe: FastEngine) -> bool:
    """No request reloading, and no prefilling request ahead of a decoding one."""
    prefilling = False
    for req in fe.sched.running:
        if req.status == "loading":
            return False
        if req.num_output_tokens > 0 and req.num_computed_tokens == req.num_tokens - 1:
            if prefilling:
                return False
        else:
            prefilling = True
    return True


def to_lazy(fe: FastEngine) -> None:
    """Take the scheduler's running requests back, decoders lazy, in running order."""
    for req in fe.sched.running:
        fe._admit(req)
        if req.num_output_tokens > 0 and req.num_computed_tokens == req.num_tokens - 1:
            fe._add_decoder(req)
            fe.fresh.append(req)  # remove_skipped may lag by its last prefill chunk
        else:
            fe.explicit[req.running_seq] = req
    fe.sched.running = []
    fe.explicit_mode = False


def explicit_step(
    core: EngineCore, now_s: float, token_times: dict[str, list[float]] | None
) -> StepResult:
    """One ``EngineCore`` step, with per-token times and the client's cancellations.

    A request whose client cancels after ``cancel_after_tokens`` outputs is aborted after the
    step that gave it the last one (as a client's abort reaches vLLM after the step).
    """
    result = core.step(now_s)
    end_s = now_s + result.duration_s  # a step's tokens exist when it ends
    if token_times is not None:
        for out in result.outputs:
            token_times.setdefault(out.request_id, []).append(end_s)
    for out in result.outputs:
        if out.finished:
            continue
        req = core.requests.get(out.request_id)
        if req is not None and req.num_output_tokens >= req.output_limit:
            core.abort_request(out.request_id)
            req.finish_reason = "cancelled"
            req.finish_s = end_s
    return result
