"""The one driver of simulated replicas: a deterministic event loop in virtual time.

It steps any engine that keeps the step protocol (:class:`kvbudget.sim.stepped.SteppedReplica`):
the vLLM-style paged replica (:class:`kvbudget.sim.replica.Replica`) and llama.cpp's slot
server (:class:`kvbudget.sim.slots_replica.SlotReplica`). Every simulated path steps its
replicas here: the cluster (:mod:`kvbudget.sim.cluster`), accept's simulated targets (one cell
per :meth:`Driver.run`, on the same replica so its cache carries over), ``kvbudget calibrate
--validate``'s predictions, ``kvbudget sim --engine llamacpp``, the audit's simulated probe (one
request at a time) and ``kvbudget serve`` (:mod:`kvbudget.serve.engine`, an async shell over the
step-wise API below). Scale-in, crashes and aborts are the paged replica's only.

Two ways in, one set of primitives. :meth:`Driver.run` feeds a request stream and loops over
the event queue; the step-wise API is for a caller that learns of its requests as they come
(a server): :meth:`Driver.submit` (an arrival now: routed, admitted or refused),
:meth:`Driver.abort` (a client gone: its blocks are freed now), :meth:`Driver.next_event_s`
(when the next replica step is due) and :meth:`Driver.step` (handle that event, returning a
:class:`StepOutcome` with the step's tokens and finishes). Both go through the same
``_dispatch`` (one handler per event type), ``_step`` (the only place a replica is stepped and
its finished requests handed out) and ``_route`` (the only place a request is admitted or
refused).

Events (``(time_s, priority, seq)`` in :mod:`kvbudget.sim.events`; their typed payloads in
:mod:`kvbudget.sim.drive_events`): arrivals (pulled one at a time from the request stream, which
must come in arrival order), replica steps (a replica that has work steps back to back; a
step's state change is applied when it starts and its tokens exist when it ends), scale-out (a
new replica that accepts work only from its ready time, with an empty cache), scale-in, crashes
and periodic samples of KV usage / running / waiting.

Nothing is kept here: finished requests go to ``on_finish`` as soon as their step ends,
refused ones to ``on_reject``, requests that never arrived before the horizon to
``on_not_run`` and samples to ``on_sample``, so a caller that streams them out runs in memory
flat in the number of requests. Closed loop (``concurrency``): see
:class:`kvbudget.sim.drive_types.RequestFeed`.
"""

from __future__ import annotations

from kvbudget.errors import ConfigError, KvbudgetError, SimulationError
from kvbudget.sim.drive_events import StepDue
from kvbudget.sim.drive_loop import EventLoop
from kvbudget.sim.drive_types import (
    DriveOptions,
    DriveOutcome,
    OnStep,
    R,
    RequestIn,
    ScaleOut,
    StepOutcome,
)
from kvbudget.sim.replica import Replica
from kvbudget.sim.request import as_engine_request
from kvbudget.sim.stepped import F

__all__ = ["DriveOptions", "DriveOutcome", "Driver", "OnStep", "ScaleOut", "StepOutcome"]


class Driver(EventLoop[R, F]):
    """Replicas (``R``, ending requests as ``F``) behind a router; :meth:`run` feeds them a
    stream of requests, or a caller drives them step by step (:meth:`submit`, :meth:`abort`,
    :meth:`step`)."""

    # ------------------------------------------------------------------ the step-wise API
    def submit(self, request: RequestIn, now_s: float) -> KvbudgetError | None:
        """A request arrives at ``now_s`` (not before the last event handled): route it now.

        Returns ``None`` when a replica admitted it (a replica that was idle gets a step
        event at ``now_s``), else the refusal (also given to ``on_reject``).
        """
        self._advance_clock(now_s)
        return self._route(as_engine_request(request), now_s)

    def abort(self, request_id: str) -> bool:
        """The client is gone: drop the request now and free its blocks (``False`` if no
        replica holds it). It is handed to ``on_finish`` at once (``finish_reason`` "abort");
        tokens of the step in flight for it are dropped by the caller."""
        for rep in self.replicas:
            if not isinstance(rep, Replica):
                raise ConfigError(
                    f"abort: modelled for the paged replica only, not {type(rep).__name__}",
                    field="engine",
                )
            if request_id in rep.core.requests:
                if rep.fast is not None:
                    raise ConfigError(
                        "abort: the replica runs the lazy-decode fast path; build it with "
                        "fast_path=False",
                        field="fast_path",
                    )
                rep.core.abort_request(request_id)
                self._drain(rep)
                return True
        return False

    def next_event_s(self) -> float | None:
        """When the next event is due (``None``: nothing is pending; a submission restarts)."""
        return self._queue.peek_time()

    def step(self, now_s: float) -> StepOutcome:
        """Handle the next event if it is due by ``now_s``, as if at ``now_s``.

        A caller on the wall clock comes to a step at or after its due time; the step starts
        when it comes (its state change now, its tokens at ``end_s``). Nothing due: an outcome
        with ``kind == ""``. A step that raises leaves its replica idle (the next submission
        restarts it).
        """
        queue = self._queue
        due = queue.peek_time()
        if due is None or due > now_s:
            return StepOutcome("", now_s, now_s)
        self._advance_clock(now_s)
        _t, _p, _s, event = queue.pop()
        if not isinstance(event, StepDue):  # only run() queues other events; it drops them
            raise SimulationError(f"driver: step(): a {type(event).__name__} event was queued")
        finished: list[F] = []
        self._collect = finished
        try:
            end = self._step(event, now_s)
        except BaseException:
            self.replicas[event.replica].busy = False
            raise
        finally:
            self._collect = None
        if end is None:
            return StepOutcome("step", now_s, now_s, None, (), finished)
        index = event.replica
        outputs = self.replicas[index].last_outputs
        return StepOutcome("step", now_s, end, index, outputs, finished)

    def _advance_clock(self, now_s: float) -> None:
        if now_s < self.now_s:
            raise SimulationError(
                f"driver: time went back from {self.now_s:g} s to {now_s:g} s; the step-wise "
                "API needs a clock that never goes back"
            )
        self.now_s = now_s
