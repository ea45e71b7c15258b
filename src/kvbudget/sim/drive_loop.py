"""The driver's event loop (:class:`EventLoop`; :class:`kvbudget.sim.driver.Driver` adds the
step-wise API): one handler per event type, ``_step`` the only place a replica is stepped,
``_route`` the only place a request is admitted or refused.

Invariants:

- Events pop in ``(time_s, priority, seq)`` order (:mod:`kvbudget.sim.events`); a handler only
  pushes events at or after its own time.
- A replica has at most one live step event: ``StepDue(replica, gen)`` with ``gen`` equal to
  its ``step_gen``; an arrival that restarts a stalled replica bumps ``step_gen`` and the old
  event is dropped when it pops.
- A request admitted by a replica comes out once per admission: through ``on_finish`` (it
  ended; a refusal found while stepping, as llama.cpp's slot server finds one, is an ending)
  or, moved by a scale-in or a crash, as a re-arrival. A refusal at admission goes to
  ``on_reject``; arrivals a horizon cut to ``on_not_run``. Closed loop, each finish and each
  refusal releases the next request of the stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Generic, cast

from kvbudget.errors import ConfigError, KvbudgetError, SimulationError
from kvbudget.sim.drive_events import (
    SAMPLE,
    Arrival,
    DriveEvent,
    Rearrival,
    ScaleInDeadline,
    StepDue,
    next_sample_s,
    seed,
)
from kvbudget.sim.drive_route import eligible, route_request
from kvbudget.sim.drive_types import (
    BuildReplica,
    DriveOptions,
    DriveOutcome,
    OnFinish,
    OnNotRun,
    OnReject,
    OnSample,
    OnStep,
    R,
    RequestFeed,
    RequestIn,
    ScaleOut,
    no_build,
    sample_replica,
)
from kvbudget.sim.events import (
    PRIO_ARRIVAL,
    PRIO_RELEASED,
    PRIO_SAMPLE,
    PRIO_SCALE,
    PRIO_STEP,
    EventQueue,
)
from kvbudget.sim.lifecycle import Crash, LifecycleStats, ScaleIn, after_crash, at_deadline
from kvbudget.sim.replica import Replica
from kvbudget.sim.request import EngineRequest, as_engine_request
from kvbudget.sim.router import Router
from kvbudget.sim.stepped import F

__all__ = ["EventLoop"]


class EventLoop(Generic[R, F]):
    """Replicas (``R``, ending requests as ``F``) behind a router, and :meth:`run`: feed them a
    stream of requests in virtual time."""

    def __init__(
        self,
        replicas: list[R],
        router: Router,
        *,
        on_finish: OnFinish[F, R],
        on_reject: OnReject[R],
        on_not_run: OnNotRun | None = None,
        on_step: OnStep[R] | None = None,
        on_sample: OnSample[R] = sample_replica,
        build: BuildReplica[R] = no_build,
    ) -> None:
        if not replicas:
            raise ConfigError("replicas: need at least one replica", field="replicas")
        self.replicas = replicas
        self.router = router
        self.on_finish = on_finish
        self.on_reject = on_reject
        self.on_not_run = on_not_run
        self.on_step = on_step
        self.on_sample = on_sample
        self.build = build
        self.num_finished = 0
        self.num_rejected = 0
        #: engine steps over the driver's life (every run and every :meth:`step`)
        self.num_steps = 0
        #: what scale-in, migration and crashes cost (kvbudget.sim.lifecycle)
        self.lifecycle = LifecycleStats()
        #: the time of the last event handled (the step-wise API's clock)
        self.now_s = 0.0
        self._queue: EventQueue[DriveEvent] = EventQueue()
        # what the current run set (run() only; the step-wise API has no feed)
        self._feed: RequestFeed | None = None
        self._max_steps: int | None = None
        self._step_limit: int | None = None
        self._sample_every_s: float | None = None
        self._turnaround_s: float | None = None
        self._last_end = 0.0
        self._num_arrived = 0
        # step(): where this event's finishes are collected
        self._collect: list[F] | None = None

    # ------------------------------------------------------------------ the event loop
    def run(
        self,
        requests: Iterable[RequestIn],
        options: DriveOptions | None = None,
        *,
        scale_out: Iterable[ScaleOut] = (),
        events: Iterable[ScaleIn | Crash] = (),
    ) -> DriveOutcome:
        """Feed ``requests`` (in arrival order) and step until done or the horizon.

        ``events``: scale-in and crashes (:mod:`kvbudget.sim.lifecycle`); the replicas they
        name must run the explicit engine (no lazy-decode fast path). A run starts a fresh
        event queue (do not mix it with the step-wise API on one driver).
        """
        opts = options or DriveOptions()
        replicas = self.replicas
        self._queue = queue = EventQueue[DriveEvent]()
        feed = RequestFeed(requests, opts, self.num_finished + self.num_rejected)
        seed(queue, feed, replicas, opts, scale_out, events)
        self._feed = feed
        self._sample_every_s = opts.sample_every_s
        self._max_steps = opts.max_steps
        self._turnaround_s = opts.turnaround_s
        start_steps = self.num_steps
        self._step_limit = None if opts.max_steps is None else start_steps + opts.max_steps
        self._last_end = opts.start_s  # end of the last step or the last arrival
        self._num_arrived = 0
        horizon = opts.max_simulated_s
        dispatch = self._dispatch
        now = opts.start_s
        num_events = 0
        hit_horizon = False
        try:
            while len(queue):
                now, _prio, _seq, event = queue.pop()
                if horizon is not None and now > horizon:
                    if isinstance(event, (Arrival, Rearrival)):
                        queue.push(now, PRIO_ARRIVAL, event)  # reported as not run
                    now = horizon
                    hit_horizon = True
                    break
                num_events += 1
                dispatch(event, now)
        finally:
            self._feed = None  # the step-wise API has no feed and no step limit
            self._turnaround_s = None
            self._step_limit = None
        self.now_s = max(self.now_s, now)
        if self.on_not_run is not None:
            while len(queue):
                _t, _p, _s, event = queue.pop()
                if isinstance(event, (Arrival, Rearrival)):
                    self.on_not_run(event.request)
            for raw in feed.stream:
                self.on_not_run(as_engine_request(raw))
        self._queue = EventQueue()  # what a horizon left is dropped, as the run's own
        return DriveOutcome(
            now_s=now,
            last_activity_s=self._last_end,
            num_events=num_events,
            num_steps=self.num_steps - start_steps,
            hit_horizon=hit_horizon,
            num_arrived=self._num_arrived,
        )

    def _dispatch(self, event: DriveEvent, now: float) -> float | None:
        """Handle one event at ``now`` (one handler per event type); returns the end of the
        replica step it ran, if any."""
        if isinstance(event, StepDue):  # the hot one first
            return self._step(event, now)
        if isinstance(event, Arrival):
            self._on_arrival(event.request, now)
        elif isinstance(event, Rearrival):  # a retry or a migrated session: nothing pulled
            self._route(event.request, now)
        elif isinstance(event, ScaleOut):
            new = self.build(event.setup, event.at_s + event.cold_start_s)
            new.warmup_s = event.warmup_s
            self.replicas.append(new)
        elif isinstance(event, ScaleIn):
            self.replicas[event.replica].ready_s = float("inf")  # the router skips it
            self._queue.push(now + event.grace_s, PRIO_SCALE, ScaleInDeadline(event))
        elif isinstance(event, ScaleInDeadline):
            self._deadline(event.scale_in.replica, event.scale_in, now)
        elif isinstance(event, Crash):
            self._crash(event, now)
        else:  # Sample
            for rep in self.replicas:
                self.on_sample(rep, now)
            at = next_sample_s(self.replicas, self._queue, self._sample_every_s, now)
            if at is not None:
                self._queue.push(at, PRIO_SAMPLE, SAMPLE)
        return None

    def _on_arrival(self, req: EngineRequest, now: float) -> None:
        """A request of run()'s stream arrives: pull the next one (open loop) or, when this one
        is refused, release the next one (closed loop)."""
        feed = self._feed
        assert feed is not None
        self._num_arrived += 1
        self._last_end = max(self._last_end, now)
        queue = self._queue
        if feed.closed is None:
            nxt = feed.pull()
            if nxt is not None:
                queue.push(nxt.arrival_s, PRIO_ARRIVAL, Arrival(nxt))
            self._route(req, now)
        elif self._route(replace(req, arrival_s=now), now) is not None:
            nxt = feed.refused(now)
            if nxt is not None:
                # a capped open loop: not before its own arrival (closed loops arrive at 0)
                queue.push(max(now, nxt.arrival_s), PRIO_ARRIVAL, Arrival(nxt))

    def _step(self, event: StepDue, now: float) -> float | None:
        """Step replica ``event.replica`` at ``now`` (the one place a replica is stepped): hand
        out what finished, release closed-loop arrivals, chain its next step. Returns the
        step's end, or ``None`` when the event was superseded."""
        index, gen = event
        rep = self.replicas[index]
        if gen != rep.step_gen:
            return None  # superseded: an arrival restarted this stalled replica
        duration = rep.step(now)
        rep.waking = False
        released = self._release_held(rep, now) if rep.held else False
        end = now + duration
        feed = self._feed
        turnaround = self._turnaround_s
        ended: Sequence[float] = ()
        if turnaround is not None and feed is not None and feed.closed is not None:
            ended = [rep.ended_s(item, end) + turnaround for item in rep.finished()]
        self._drain(rep)
        self.num_steps += 1
        limit = self._step_limit
        if limit is not None and self.num_steps > limit:
            raise SimulationError(
                f"more than {self._max_steps} engine steps in one run; shorten the workload"
            )
        rep.step_end_s = end
        queue = self._queue
        if turnaround is not None and feed is not None and feed.closed is not None:
            for at in ended:  # each ended request's client sends its next one
                for nxt in feed.release(feed.released + 1, at):
                    queue.push(max(at, nxt.arrival_s), PRIO_ARRIVAL, Arrival(nxt))
        elif feed is not None and feed.closed is not None:
            for nxt in feed.release(self.num_finished + self.num_rejected, end):
                # vllm bench serve's semaphore: sent when a slot frees, not before the
                # request's own arrival (a capped open loop; closed loops arrive at 0). Sent
                # because of this step's output, it reaches the engine after the step that
                # starts at ``end`` has begun (PRIO_RELEASED; kvbudget.sim.events)
                if nxt.arrival_s > end:
                    queue.push(nxt.arrival_s, PRIO_ARRIVAL, Arrival(nxt))
                else:
                    queue.push(end, PRIO_RELEASED, Arrival(nxt))
        if duration > 0 or rep.last_num_scheduled_tokens > 0:
            # (a zero-cost timing model computes tokens in no time: still a step; the
            # lazy-decode fast path never sets last_num_scheduled_tokens)
            self._last_end = max(self._last_end, end)
            on_step = self.on_step
            if on_step is not None:
                on_step(rep, index, now, duration)
            rep.stalled = False
            queue.push(end, PRIO_STEP, event)
        elif released:
            # nothing ran, and the held requests reach an engine that would block: at once
            rep.waking = True
            queue.push(now, PRIO_STEP, event)
        else:
            wake = rep.wake_s()
            if wake is not None and rep.has_work():
                # only reloading requests: wake when the first transfer ends (an arrival
                # before that restarts the replica at once)
                rep.stalled = True
                queue.push(max(wake, now), PRIO_STEP, event)
            else:
                rep.busy = False
        return end

    def _release_held(self, rep: R, now: float) -> bool:
        """Async scheduling: the step that began at ``now`` has been scheduled; the requests
        held while the previous one ran join the engine now (the step after this one sees
        them). A refusal counts as at the arrival (closed loop: it releases the next request).
        Returns whether any was added."""
        held = rep.held
        rep.held = []
        added = False
        feed = self._feed
        for req in held:
            try:
                rep.add(req)
                added = True
            except KvbudgetError as exc:
                self.num_rejected += 1
                self.on_reject(req, rep, exc)
                if feed is not None and feed.closed is not None:
                    nxt = feed.refused(now)
                    if nxt is not None:
                        at = nxt.arrival_s if nxt.arrival_s > now else now
                        self._queue.push(at, PRIO_ARRIVAL, Arrival(nxt))
        return added

    def _drain(self, rep: R) -> None:
        done = rep.finished()
        if done:
            on_finish = self.on_finish
            for req in done:
                on_finish(req, rep)
            self.num_finished += len(done)
            if self._collect is not None:
                self._collect.extend(done)
            done.clear()

    # ------------------------------------------------------------------ lifecycle events
    def _deadline(self, index: int, event: ScaleIn, now: float) -> None:
        """Scale-in grace over: what is left on replica ``index`` is cancelled and retried, or
        migrated (``seed`` checked that it is a paged replica)."""
        rep = self.replicas[index]
        self._resend_held(rep, now)
        cancelled, resend = at_deadline(cast(Replica, rep), event, now, self.lifecycle)
        for req in cancelled:
            self.on_finish(cast(F, req), rep)  # a paged replica's F is its SimRequest
            if self._collect is not None:
                self._collect.append(cast(F, req))
        for at, moved in resend:
            self._queue.push(at, PRIO_ARRIVAL, Rearrival(moved))
        rep.busy = False

    def _crash(self, event: Crash, now: float) -> None:
        """The pod dies with its KV; the application re-sends its saved contexts (a paged
        replica: ``seed`` checked)."""
        rep = self.replicas[event.replica]
        rep.ready_s = float("inf")
        self._resend_held(rep, now)
        paged = cast(Replica, rep)
        resend = after_crash(paged, now, self.lifecycle)
        rep.busy = False
        rep.step_gen += 1  # its pending step event is stale now
        self.replicas.append(self.build(paged.setup, now + event.restart_s))
        for moved in resend:
            self._queue.push(now, PRIO_ARRIVAL, Rearrival(moved))

    def _resend_held(self, rep: R, now: float) -> None:
        """Async scheduling: requests held for ``rep`` (not yet in its engine) go to the router
        again when it scales in or crashes."""
        held = rep.held
        rep.held = []
        for req in held:
            self._queue.push(now, PRIO_ARRIVAL, Rearrival(req))

    # ------------------------------------------------------------------ admission
    def _route(self, req: EngineRequest, now: float) -> KvbudgetError | None:
        """Route one arrival (the one place a request is admitted or refused); returns the
        refusal, or ``None`` when the chosen replica took it."""
        replicas = self.replicas
        ready = eligible(replicas, req.request_id, now)
        views = [replicas[i] for i in ready]
        route = route_request(req, views[0], self.router.needs_hashes)
        idx = ready[self.router.choose(route, views, now)]
        rep = replicas[idx]
        if rep.async_scheduling and rep.busy and not rep.stalled and not rep.waking:
            # the running step's successor is already scheduled: held until it has begun
            rep.held.append(req)
            return None
        try:
            rep.add(req)
        except KvbudgetError as exc:
            self.num_rejected += 1
            self.on_reject(req, rep, exc)
            return exc
        if not rep.busy or rep.stalled:
            rep.busy = True
            rep.waking = True  # an idle engine takes what reaches it before it steps
            rep.stalled = False
            rep.step_gen += 1
            self._queue.push(max(now, rep.ready_s), PRIO_STEP, StepDue(idx, rep.step_gen))
        return None
