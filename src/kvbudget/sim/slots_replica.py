"""llama.cpp's slot server as an engine the driver steps (:mod:`kvbudget.sim.stepped`).

:class:`SlotReplica` wraps a :class:`~kvbudget.sim.slots.SlotEngine` (the scheduling, following
``tools/server/server-context.cpp``) in the step protocol; :func:`run_slots` feeds it a request
list through the one driver (:class:`kvbudget.sim.driver.Driver`), open or closed loop.

Invariants (beyond the step protocol's):

- ``add`` never refuses: llama.cpp answers a prompt that fits no slot when it reaches the head
  of the queue in a server iteration, so the refusal is a :class:`SlotRequestResult` with
  ``status="error"`` and ``done_s`` at that iteration's start, handed out by that step.
- A request that arrives while an iteration runs waits for the next one; one that arrives at
  the instant an iteration starts joins it (arrivals sort before steps, :mod:`kvbudget.sim.events`).
- Closed loop: a client's next request reaches the server ``turnaround_s`` after its previous
  one ended (``DriveOptions.turnaround_s``; ``done_s`` of the ended one, a refusal's too) and
  joins the next iteration that starts at or after then.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.errors import ConfigError
from kvbudget.sim.driver import DriveOptions, Driver
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.router import Router
from kvbudget.sim.slots import SlotConfig, SlotEngine, SlotRequest, SlotRequestResult, SlotStats
from kvbudget.sim.stepped import SteppedReplica
from kvbudget.sim.timing import StepTimeModel

__all__ = ["SlotReplica", "run_slots"]


class SlotReplica(SteppedReplica[SlotRequestResult]):
    """One llama.cpp server (``-np`` slots) as a replica of the driver."""

    def __init__(self, name: str, engine: SlotEngine) -> None:
        super().__init__(name, engine.timing)
        self.engine = engine
        self._done: list[SlotRequestResult] = []

    def add(self, req: EngineRequest) -> object:
        self.num_routed += 1
        slot_req = SlotRequest(
            req.request_id, req.arrival_s, req.prompt_token_ids, req.max_output_tokens
        )
        self.engine.add_request(slot_req)
        return slot_req

    def has_work(self) -> bool:
        return self.engine.has_work()

    def step(self, now_s: float) -> float:
        engine = self.engine
        before = engine.stats.num_steps
        duration, done = engine.step(now_s)
        self._done.extend(done)
        # a batch ran (a zero-cost timing model prices it at 0 s: still a step)
        self.last_num_scheduled_tokens = engine.stats.num_steps - before
        return duration

    def finished(self) -> list[SlotRequestResult]:
        return self._done

    def ended_s(self, item: SlotRequestResult, step_end_s: float) -> float:
        return item.done_s if item.done_s is not None else step_end_s

    # ------------------------------------------------------------------ router views
    def num_outstanding(self) -> int:
        return len(self.engine.waiting) + sum(1 for s in self.engine.slots if s.req is not None)

    def kv_usage(self) -> float:
        cells = sum(s.n_past for s in self.engine.slots if s.req is not None)
        return cells / self.engine.stats.total_cells if self.engine.stats.total_cells else 0.0

    def queued_prefill_tokens(self) -> int:
        waiting = sum(len(r.prompt_token_ids) for r in self.engine.waiting)
        return waiting + sum(
            len(s.req.prompt_token_ids) - s.prompt_done
            for s in self.engine.slots
            if s.req is not None
        )


def run_slots(
    config: SlotConfig,
    timing: StepTimeModel,
    requests: Sequence[SlotRequest],
    *,
    concurrency: int | None = None,
    turnaround_s: float = 0.0,
    stagger_s: float = 0.0,
    max_steps: int = 10_000_000,
    engine: SlotEngine | None = None,
    start_s: float = 0.0,
) -> tuple[list[SlotRequestResult], SlotStats]:
    """Serve ``requests``: by their ``arrival_s`` (open loop) or, with ``concurrency``, by
    ``concurrency`` clients (closed loop; ``arrival_s`` is then the arrival time at the server):
    client ``i`` sends its first request at ``i * stagger_s``, and each client's next request
    arrives ``turnaround_s`` after its previous one ended (response, client, new request).
    A request that arrives while an iteration runs waits for the next one, as in llama.cpp.
    Results in request order.

    ``engine`` continues an idle engine from an earlier call (its slots keep their prompts, as a
    running server's do); its statistics restart. Times then run from ``start_s`` (at or after
    the earlier call's end, so that the slots' least-recently-used order stays right)."""
    if engine is None:
        engine = SlotEngine(config, timing)
    elif engine.has_work():
        raise ConfigError(
            "engine: still has requests; continue only an idle engine", field="engine"
        )
    else:
        engine.stats = SlotStats(total_cells=engine.config.num_slots * engine.config.n_ctx_slot)
    if concurrency is None:
        # by arrival, ties in request order
        order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
        arrivals = [start_s + requests[i].arrival_s for i in order]
    else:
        if concurrency < 1:
            raise ConfigError(f"concurrency: must be >= 1, got {concurrency}", field="concurrency")
        order = list(range(len(requests)))
        arrivals = [start_s] * len(order)  # client i's first at i * stagger_s (DriveOptions)
    stream = [
        EngineRequest(
            requests[i].request_id,
            requests[i].prompt_token_ids,
            requests[i].output_tokens,
            arrival_s=at,
        )
        for i, at in zip(order, arrivals, strict=True)
    ]
    results: list[SlotRequestResult] = []
    driver: Driver[SlotReplica, SlotRequestResult] = Driver(
        [SlotReplica("llamacpp-0", engine)],
        Router("round_robin"),
        on_finish=lambda res, rep: results.append(res),
        on_reject=_never_refused,
    )
    driver.run(
        stream,
        DriveOptions(
            concurrency=concurrency,
            turnaround_s=turnaround_s,
            stagger_s=stagger_s,
            start_s=start_s,
            max_steps=max_steps,
        ),
    )
    rank = {r.request_id: i for i, r in enumerate(requests)}
    results.sort(key=lambda r: rank[r.request_id])
    return results, engine.stats


def _never_refused(req: EngineRequest, rep: SlotReplica, exc: Exception) -> None:
    raise AssertionError(f"slot replica refused {req.request_id} at admission: {exc}")
