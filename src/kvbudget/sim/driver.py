"""The one driver of simulated replicas: a deterministic event loop in virtual time.

Every simulated path steps its replicas here: the cluster (:mod:`kvbudget.sim.cluster`),
accept's simulated target (one cell per :meth:`Driver.run`, on the same replica so its cache
carries over) and the audit's simulated probe (one request at a time). ``kvbudget serve``
steps the same replica's engine core from an asyncio loop on the wall clock instead
(:mod:`kvbudget.serve.engine` says why: live arrivals, client aborts, per-token streaming).

Events (``(time_s, priority, seq)``, see :mod:`kvbudget.sim.events`): arrivals (pulled one at
a time from the request stream, which must come in arrival order), replica steps (a replica
that has work steps back to back; a step's state change is applied when it starts and its
tokens exist when it ends), scale-out (a new replica that accepts work only from its ready
time, with an empty cache) and periodic samples of KV usage / running / waiting.

Nothing is kept here: finished requests go to ``on_finish`` as soon as their step ends,
refused ones to ``on_reject``, requests that never arrived before the horizon to
``on_not_run`` and samples to ``on_sample``, so a caller that streams them out runs in memory
flat in the number of requests.

Closed loop (``concurrency``): that many requests in flight; each finished (or refused)
request releases the next one, which arrives when the step that finished it ends, until
``admit_until_s`` (if given) has passed.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from kvbudget.errors import ConfigError, KvbudgetError, SimulationError
from kvbudget.sim.events import PRIO_ARRIVAL, PRIO_SAMPLE, PRIO_SCALE, PRIO_STEP, EventQueue
from kvbudget.sim.lifecycle import (
    Crash,
    LifecycleStats,
    ScaleIn,
    continuation,
    retry,
    streamed_outputs,
)
from kvbudget.sim.prefix import block_hashes
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest, SimRequest, as_engine_request
from kvbudget.sim.router import Router, RouteRequest

OnFinish = Callable[[SimRequest, Replica], None]
OnReject = Callable[[EngineRequest, Replica, KvbudgetError], None]
OnNotRun = Callable[[EngineRequest], None]
OnStep = Callable[[Replica, int, float, float], None]
OnSample = Callable[[Replica, float], None]
BuildReplica = Callable[[ReplicaSetup, float], Replica]


@dataclass(frozen=True, slots=True)
class ScaleOut:
    """Add a replica at ``at_s``; it serves from ``at_s + cold_start_s`` with a cold cache.

    ``warmup_s``: the router then shifts traffic to it gradually: during the warm-up a request
    may go to it only if its request id's share (crc32 / 2**32) is below the elapsed fraction
    of the warm-up, so about that fraction of the traffic is eligible for it.
    """

    at_s: float
    setup: ReplicaSetup
    cold_start_s: float = 60.0
    warmup_s: float = 0.0


@dataclass(frozen=True, slots=True)
class DriveOptions:
    """How one :meth:`Driver.run` feeds its requests and when it stops."""

    #: closed loop: this many requests in flight; the next one arrives when one finishes
    concurrency: int | None = None
    #: closed loop: no request is released once a step ends at or after this time
    admit_until_s: float | None = None
    #: stop at this simulated time; what is still in flight is left in the replicas
    max_simulated_s: float | None = None
    #: sample every replica's state this often (simulated seconds), from the first event on
    sample_every_s: float | None = None
    #: first sample time (the timeline's origin when driving several runs on one replica)
    start_s: float = 0.0
    #: a runaway guard: more engine steps than this raise ``SimulationError``
    max_steps: int | None = None


@dataclass(frozen=True, slots=True)
class DriveOutcome:
    """What one run did (its requests went to the callbacks)."""

    #: time of the last event handled (the horizon when it was reached)
    now_s: float
    #: end of the last engine step or the last arrival, whichever is later (``start_s`` when
    #: nothing happened): where the run's own timeline ends, samples aside
    last_activity_s: float
    num_events: int
    num_steps: int
    hit_horizon: bool
    num_arrived: int


def _sample(rep: Replica, now_s: float) -> None:
    rep.sample(now_s)


def _default_build(setup: ReplicaSetup, ready_s: float) -> Replica:
    raise ConfigError("scale_out: this driver was given no replica builder", field="scale_out")


class Driver:
    """Replicas behind a router; :meth:`run` feeds them a stream of requests."""

    def __init__(
        self,
        replicas: list[Replica],
        router: Router,
        *,
        on_finish: OnFinish,
        on_reject: OnReject,
        on_not_run: OnNotRun | None = None,
        on_step: OnStep | None = None,
        on_sample: OnSample = _sample,
        build: BuildReplica = _default_build,
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
        #: what scale-in, migration and crashes cost (kvbudget.sim.lifecycle)
        self.lifecycle = LifecycleStats()

    def _drain(self, rep: Replica) -> None:
        done = rep.core.finished
        if done:
            on_finish = self.on_finish
            for req in done:
                on_finish(req, rep)
            self.num_finished += len(done)
            done.clear()

    def run(
        self,
        requests: Iterable[Any],
        options: DriveOptions | None = None,
        *,
        scale_out: Iterable[ScaleOut] = (),
        events: Iterable[ScaleIn | Crash] = (),
    ) -> DriveOutcome:
        """Feed ``requests`` (in arrival order) and step until done or the horizon.

        ``events``: scale-in and crashes (:mod:`kvbudget.sim.lifecycle`); the replicas they
        name must run the explicit engine (no lazy-decode fast path).
        """
        opts = options or DriveOptions()
        stream: Iterator[Any] = iter(requests)
        replicas = self.replicas
        queue: EventQueue[tuple[str, Any]] = EventQueue()
        closed = opts.concurrency
        last_arrival = float("-inf")

        def pull() -> EngineRequest | None:
            nonlocal last_arrival
            raw = next(stream, None)
            if raw is None:
                return None
            req = as_engine_request(raw)
            if req.arrival_s < last_arrival:
                raise ConfigError(
                    f"request {req.request_id}: arrives at {req.arrival_s:g} s, before the "
                    f"previous request ({last_arrival:g} s); a request stream must be in arrival "
                    "order (sort it, or pass a list to kvbudget.sim.cluster.simulate)",
                    field="requests",
                )
            last_arrival = req.arrival_s
            return req

        num_arrived = 0
        if closed is not None:
            if closed < 1:
                raise ConfigError(f"concurrency: must be >= 1, got {closed}", field="concurrency")
            for _ in range(closed):
                req = pull()
                if req is None:
                    break
                queue.push(req.arrival_s, PRIO_ARRIVAL, ("arrival", req))
        else:
            first = pull()
            if first is not None:
                queue.push(first.arrival_s, PRIO_ARRIVAL, ("arrival", first))
        for scale in scale_out:
            queue.push(scale.at_s, PRIO_SCALE, ("scale", scale))
        for event in events:
            if event.replica >= len(replicas):
                raise ConfigError(
                    f"{type(event).__name__.lower()}: replica {event.replica} does not exist "
                    f"(there are {len(replicas)}); give an index from 0",
                    field="replica",
                )
            if replicas[event.replica].fast is not None:
                raise ConfigError(
                    "scale_in/crash: the replica runs the lazy-decode fast path; build it with "
                    "fast_path=False",
                    field="fast_path",
                )
            kind = "scale_in" if isinstance(event, ScaleIn) else "crash"
            queue.push(event.at_s, PRIO_SCALE, (kind, event))
        if opts.sample_every_s:
            queue.push(opts.start_s, PRIO_SAMPLE, ("sample", None))
        horizon = opts.max_simulated_s
        admit_until = opts.admit_until_s
        max_steps = opts.max_steps
        on_step = self.on_step
        now = opts.start_s
        last_end = opts.start_s  # end of the last step or the last arrival
        num_events = 0
        num_steps = 0
        released = self.num_finished + self.num_rejected  # closed loop: finishes seen
        hit_horizon = False
        while len(queue):
            now, _prio, _seq, (kind, payload) = queue.pop()
            if horizon is not None and now > horizon:
                if kind in ("arrival", "rearrival"):
                    queue.push(now, PRIO_ARRIVAL, (kind, payload))  # reported as not run below
                now = horizon
                hit_horizon = True
                break
            num_events += 1
            if kind == "step":
                index, gen = payload
                rep = replicas[index]
                if gen != rep.step_gen:
                    continue  # superseded: an arrival restarted this stalled replica
                duration = rep.step(now)
                self._drain(rep)
                num_steps += 1
                if max_steps is not None and num_steps > max_steps:
                    raise SimulationError(
                        f"more than {max_steps} engine steps in one run; shorten the workload"
                    )
                end = now + duration
                rep.step_end_s = end
                if closed is not None:
                    done = self.num_finished + self.num_rejected
                    while released < done:
                        released += 1
                        if admit_until is not None and end >= admit_until:
                            continue
                        nxt = pull()
                        if nxt is None:
                            break
                        queue.push(end, PRIO_ARRIVAL, ("arrival", nxt))
                    released = done
                if duration > 0:
                    last_end = max(last_end, end)
                    if on_step is not None:
                        on_step(rep, index, now, duration)
                    rep.stalled = False
                    queue.push(end, PRIO_STEP, ("step", payload))
                else:
                    wake = rep.wake_s()
                    if wake is not None and rep.has_work():
                        # only reloading requests: wake when the first transfer ends (an arrival
                        # before that restarts the replica at once)
                        rep.stalled = True
                        queue.push(max(wake, now), PRIO_STEP, ("step", payload))
                    else:
                        rep.busy = False
            elif kind == "arrival":
                req = payload
                num_arrived += 1
                last_end = max(last_end, now)
                if closed is None:
                    nxt = pull()
                    if nxt is not None:
                        queue.push(nxt.arrival_s, PRIO_ARRIVAL, ("arrival", nxt))
                else:
                    req = replace(req, arrival_s=now)
                if not self._route(req, now, queue) and closed is not None:
                    released += 1
                    if admit_until is None or now < admit_until:
                        nxt = pull()
                        if nxt is not None:
                            queue.push(now, PRIO_ARRIVAL, ("arrival", nxt))
            elif kind == "rearrival":  # a retry or a migrated session: routed, nothing pulled
                self._route(payload, now, queue)
            elif kind == "scale":
                new = self.build(payload.setup, payload.at_s + payload.cold_start_s)
                new.warmup_s = payload.warmup_s
                replicas.append(new)
            elif kind == "scale_in":
                replicas[payload.replica].ready_s = float("inf")  # the router skips it
                queue.push(now + payload.grace_s, PRIO_SCALE, ("scale_in_deadline", payload))
            elif kind == "scale_in_deadline":
                self._deadline(replicas[payload.replica], payload, now, queue)
            elif kind == "crash":
                self._crash(payload, now, queue)
            else:  # sample
                for rep in replicas:
                    self.on_sample(rep, now)
                if any(r.has_work() for r in replicas) or len(queue):
                    assert opts.sample_every_s is not None
                    at = now + opts.sample_every_s
                    if not any(r.has_work() for r in replicas):
                        # idle until the next event: one sample there, not one per interval of
                        # an idle gap (a tiny rate would otherwise ask for unbounded samples)
                        at = max(at, queue.peek_time() or at)
                    queue.push(at, PRIO_SAMPLE, ("sample", None))
        if self.on_not_run is not None:
            while len(queue):
                _t, _p, _s, (kind, payload) = queue.pop()
                if kind in ("arrival", "rearrival"):
                    self.on_not_run(payload)
            for raw in stream:
                self.on_not_run(as_engine_request(raw))
        return DriveOutcome(
            now_s=now,
            last_activity_s=last_end,
            num_events=num_events,
            num_steps=num_steps,
            hit_horizon=hit_horizon,
            num_arrived=num_arrived,
        )

    def _evict(self, rep: Replica, now: float) -> list[tuple[SimRequest, int]]:
        """Every request still on ``rep`` (running first) with the outputs its client has
        received by ``now``, removed with its blocks freed."""
        held = list(rep.core.scheduler.running) + list(rep.core.requests.values())
        seen: set[int] = set()
        out: list[SimRequest] = []
        for req in held:
            if id(req) in seen or req.request_id not in rep.core.requests:
                continue
            seen.add(id(req))
            out.append(req)
        streamed = [streamed_outputs(req, now, rep.step_end_s) for req in out]
        for req in out:
            rep.core.abort_request(req.request_id)
        rep.core.finished = [r for r in rep.core.finished if r.status != "aborted"]
        return list(zip(out, streamed, strict=True))

    def _deadline(
        self, rep: Replica, event: ScaleIn, now: float, queue: EventQueue[tuple[str, Any]]
    ) -> None:
        """Scale-in grace over: cancel and retry, or migrate what is left on ``rep``."""
        stats = self.lifecycle
        for req, streamed in self._evict(rep, now):
            if event.on_deadline == "cancel_retry":
                stats.num_cancelled += 1
                stats.num_retried += 1
                stats.duplicated_prefill_tokens += req.num_prompt_tokens
                stats.duplicated_output_tokens += req.num_output_tokens
                req.num_output_tokens = streamed  # the record shows what the client received
                req.finish_reason = "cancelled"
                req.finish_s = now
                self.on_finish(req, rep)
                queue.push(now, PRIO_ARRIVAL, ("rearrival", retry(req)))
                continue
            moved = continuation(req, "migrate", streamed)
            if event.on_deadline == "reprefill":
                stats.num_migrated_reprefill += 1
                stats.duplicated_prefill_tokens += moved.num_prompt_tokens
                queue.push(now, PRIO_ARRIVAL, ("rearrival", moved))
            else:
                moved = replace(moved, kv_transferred=True)
                # every context token's KV but the last, which the target recomputes
                num_bytes = (moved.num_prompt_tokens - 1) * rep.config.kv_bytes_per_token
                stats.num_migrated_transfer += 1
                stats.transfer_bytes += num_bytes
                at = now + num_bytes / event.transfer_bandwidth_bytes_per_s
                queue.push(at, PRIO_ARRIVAL, ("rearrival", moved))
        rep.busy = False

    def _crash(self, event: Crash, now: float, queue: EventQueue[tuple[str, Any]]) -> None:
        """The pod dies with its KV; the application re-sends its saved contexts."""
        rep = self.replicas[event.replica]
        rep.ready_s = float("inf")
        stats = self.lifecycle
        lost = self._evict(rep, now)
        rep.busy = False
        rep.step_gen += 1  # its pending step event is stale now
        self.replicas.append(self.build(rep.setup, now + event.restart_s))
        for req, streamed in lost:
            moved = continuation(req, "recover", streamed)
            stats.num_lost_in_crash += 1
            stats.duplicated_prefill_tokens += moved.num_prompt_tokens
            queue.push(now, PRIO_ARRIVAL, ("rearrival", moved))

    def _route(self, req: EngineRequest, now: float, queue: EventQueue[tuple[str, Any]]) -> bool:
        """Route one arrival; ``False`` when the chosen replica refused it."""
        replicas = self.replicas
        router = self.router
        ready = [
            i
            for i, rep in enumerate(replicas)
            if rep.ready_s <= now
            and (
                rep.warmup_s <= 0
                or now >= rep.ready_s + rep.warmup_s
                or zlib.crc32(req.request_id.encode()) / 2**32 < (now - rep.ready_s) / rep.warmup_s
            )
        ]
        if not ready:
            ready = [min(range(len(replicas)), key=lambda i: replicas[i].ready_s)]
        views = [replicas[i] for i in ready]
        hashes: list[Any] = []
        if router.needs_hashes:
            cfg = views[0].config
            hashes = block_hashes(
                req.prompt_token_ids,
                cfg.block_size,
                algo=cfg.hash_algo,
                adapter_id=req.adapter_id,
                mm_hashes=req.mm_hashes,
                cache_salt=req.cache_salt,
            )
        route = RouteRequest(req.request_id, req.num_prompt_tokens, hashes, req.session_id)
        idx = ready[router.choose(route, views, now)]
        rep = replicas[idx]
        try:
            rep.add(req)
        except KvbudgetError as exc:
            self.num_rejected += 1
            self.on_reject(req, rep, exc)
            return False
        if not rep.busy or rep.stalled:
            rep.busy = True
            rep.stalled = False
            rep.step_gen += 1
            queue.push(max(now, rep.ready_s), PRIO_STEP, ("step", (idx, rep.step_gen)))
        return True
