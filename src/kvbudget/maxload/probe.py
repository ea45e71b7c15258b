"""Probe a load on any acceptance target (:class:`kvbudget.accept.targets.base.Target`).

Each probe generates ``num_requests`` requests of the workload (its lengths and prefix sharing;
the arrivals replaced by a Poisson process at the probed rate, or a closed loop at the probed
concurrency), runs them with ``target.run_cell`` and judges the records
(:func:`kvbudget.maxload.point.judge`). The engine's own figures come from the cell: its
preemptions counter, and the highest KV usage and queue length sampled (a real engine's
``/metrics``, scraped every 0.1 s while the probe runs; the simulator's state).

A :class:`Budget` bounds a search against a real engine: once the requests or the seconds it
allows are spent, the next probe raises :class:`BudgetSpent` and the search stops there, keeping
what it found. A probe is charged its planned requests before it runs; one stopped early
(:mod:`kvbudget.maxload.early_stop`, on targets that can stop: :class:`EarlyStopProbe`) is
refunded the requests it did not send.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from kvbudget.accept.targets.base import CellRun, Target
from kvbudget.load.runner import StopWhen
from kvbudget.maxload.early_stop import EarlyStop
from kvbudget.maxload.journal import ProbeJournal
from kvbudget.maxload.point import LoadKind, Point, judge
from kvbudget.maxload.slo import Slo
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.spec import generate, workload_from_dict


class BudgetSpent(Exception):
    """The search's request or time budget is spent; the message says which."""


@dataclass(slots=True)
class Budget:
    """At most ``max_requests`` requests and ``max_duration_s`` seconds (None: unbounded)."""

    max_requests: int | None = None
    max_duration_s: float | None = None
    num_requests: int = 0
    started_s: float = field(default_factory=time.monotonic)

    def charge(self, num_requests: int, *, arrivals_s: float | None = None) -> None:
        """Account for a probe of ``num_requests`` before it runs, or raise BudgetSpent.

        ``arrivals_s``: how long the probe's planned arrivals last (an open loop of ``n``
        requests at ``r``/s: ``n / r``); a probe that cannot end within the seconds left is
        not started (a low rate would otherwise hold the search for ``n / r`` seconds).
        """
        if self.max_requests is not None and self.num_requests + num_requests > self.max_requests:
            raise BudgetSpent(
                f"request budget spent: {self.num_requests} sent, the next probe needs "
                f"{num_requests} more than --max-total-requests {self.max_requests} allows"
            )
        elapsed = time.monotonic() - self.started_s
        if self.max_duration_s is not None and elapsed >= self.max_duration_s:
            raise BudgetSpent(
                f"time budget spent: {elapsed:.0f} s of --max-duration-s {self.max_duration_s:g}"
            )
        left = None if self.max_duration_s is None else self.max_duration_s - elapsed
        if left is not None and arrivals_s is not None and arrivals_s > left:
            raise BudgetSpent(
                f"time budget: the next probe's arrivals last about {arrivals_s:.0f} s, more than "
                f"the {left:.0f} s left of --max-duration-s {self.max_duration_s:g}"
            )
        self.num_requests += num_requests


def _engine_figures(run: CellRun) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in ("kv_usage", "num_waiting"):
        values = [s.value for s in run.samples if s.name == name]
        if values:
            out[f"{name}_max"] = max(values)
    return out


class TargetProbe:
    """``probe(kind, load, seed)`` -> :class:`Point`, each on ``make_target(seed)``."""

    def __init__(
        self,
        make_target: Callable[[int], Target],
        workload: dict[str, Any],
        slo: Slo,
        *,
        num_requests: int,
        budget: Budget | None = None,
    ) -> None:
        self.make_target = make_target
        self.workload = workload
        self.slo = slo
        self.num_requests = num_requests
        self.budget = budget
        #: ``--out``/``--resume``: probes already run are read from it, new ones appended
        self.journal: ProbeJournal | None = None

    def longer(self, factor: int) -> TargetProbe:
        """The same probe with ``factor`` times the requests (the rate's confirmation)."""
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.num_requests = self.num_requests * factor
        return out

    def _requests(
        self, arrivals: dict[str, Any], num: int, seed: int, cell_id: str
    ) -> tuple[list[PlannedRequest], int | None]:
        """The probe's requests, named as the acceptance names a cell's (``<cell>#0/<id>``)."""
        spec = workload_from_dict({**self.workload, "num_requests": num, "arrivals": arrivals})
        planned = generate(spec, np.random.default_rng(seed))
        named = [replace(r, request_id=f"{cell_id}#0/{r.request_id}") for r in planned]
        return named, spec.closed_loop_concurrency

    def warm_up(self, num_requests: int, seed: int) -> None:
        """Send ``num_requests`` one at a time, not judged (a real engine's first requests
        pay for compilation and allocation)."""
        if num_requests <= 0:
            return
        if self.budget is not None:
            self.budget.charge(num_requests)
        requests, _ = self._requests(
            {"kind": "closed", "concurrency": 1}, num_requests, seed, "warmup"
        )
        self.make_target(seed).run_cell(
            requests, cell_id="warmup", closed_loop_concurrency=1, duration_s=None, warmup=True
        )

    def __call__(self, kind: LoadKind, load: float, seed: int) -> Point:
        if self.journal is not None:
            done = self.journal.recorded(kind, load, seed, self.num_requests)
            if done is not None:
                # charged as when it ran: planned requests, the unsent ones refunded
                if self.budget is not None:
                    self.budget.charge(self.num_requests)
                    self.budget.num_requests -= self.num_requests - (
                        done.num_sent if done.num_sent is not None else self.num_requests
                    )
                return done
        point = self._measure(kind, load, seed)
        if self.journal is not None:
            self.journal.record(kind, load, seed, self.num_requests, point)
        return point

    def _measure(self, kind: LoadKind, load: float, seed: int) -> Point:
        if self.budget is not None:
            arrivals_s = self.num_requests / load if kind == "rate" else None
            self.budget.charge(self.num_requests, arrivals_s=arrivals_s)
        if kind == "rate":
            arrivals: dict[str, Any] = {"kind": "poisson", "rate_per_s": load}
        else:
            arrivals = {"kind": "closed", "concurrency": int(load)}
        cell_id = f"{kind}={load:g}"
        requests, concurrency = self._requests(arrivals, self.num_requests, seed, cell_id)
        stop = self._early_stop()
        run = self._run(self.make_target(seed), requests, cell_id, concurrency, stop)
        sent = len(run.records)
        if self.budget is not None and sent < self.num_requests:
            self.budget.num_requests -= self.num_requests - sent  # refund what was not sent
        point = judge(
            run.records,
            self.slo,
            kind=kind,
            load=load,
            seed=seed,
            duration_s=self._duration_s(run),
            num_preemptions=int(run.counters.get("preemptions", 0)),
            capacity_error=run.capacity_error,
        )
        # num_requests: the probe's planned requests (its length), num_sent: those sent
        point = replace(
            point, engine=_engine_figures(run), num_requests=self.num_requests, num_sent=sent
        )
        if run.stopped_early is None:
            return point
        term = stop.term if stop is not None else None
        failing: tuple[str, ...] = (term,) if term else ()
        failing += tuple(t for t in point.failing if t != term)
        return replace(point, stopped_early=run.stopped_early, failing=failing)

    def _duration_s(self, run: CellRun) -> float:
        """The seconds the probe's completed requests/s is taken over."""
        return run.duration_s

    def _early_stop(self) -> EarlyStop | None:
        """The judge that stops a probe early (None: this target runs every probe whole)."""
        return None

    def _run(
        self,
        target: Target,
        requests: list[PlannedRequest],
        cell_id: str,
        concurrency: int | None,
        stop: EarlyStop | None,
    ) -> CellRun:
        return target.run_cell(
            requests, cell_id=cell_id, closed_loop_concurrency=concurrency, duration_s=None
        )


class StoppableTarget(Target, Protocol):
    """A target whose ``run_cell`` takes a ``stop_when`` judge (:class:`HttpTarget`)."""

    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
        stop_when: StopWhen | None = None,
    ) -> CellRun: ...


class EarlyStopProbe(TargetProbe):
    """Every probe on one ``target`` (a running server: its prefix cache carries over), each
    stopped as soon as its SLO is clearly broken (:class:`kvbudget.maxload.early_stop.EarlyStop`)."""

    def __init__(
        self,
        target: StoppableTarget,
        workload: dict[str, Any],
        slo: Slo,
        *,
        num_requests: int,
        budget: Budget | None = None,
    ) -> None:
        def same_target(_seed: int) -> Target:
            return target

        super().__init__(same_target, workload, slo, num_requests=num_requests, budget=budget)
        self.target = target

    def _early_stop(self) -> EarlyStop:
        return EarlyStop(self.slo, self.num_requests)

    def _duration_s(self, run: CellRun) -> float:
        """From the first request sent to the last one finished: the load's own window, not
        the cell's wall time (which includes reading the server's identity and tokenizing the
        prompts before the clock starts, seconds on a busy server)."""
        sent = [r.sent_s for r in run.records if r.sent_s is not None and not r.warmup]
        done = [r.done_s for r in run.records if r.done_s is not None and not r.warmup]
        if sent and done and max(done) > min(sent):
            return max(done) - min(sent)
        return run.duration_s

    def _run(
        self,
        target: Target,
        requests: list[PlannedRequest],
        cell_id: str,
        concurrency: int | None,
        stop: EarlyStop | None,
    ) -> CellRun:
        return self.target.run_cell(
            requests,
            cell_id=cell_id,
            closed_loop_concurrency=concurrency,
            duration_s=None,
            stop_when=stop,
        )
