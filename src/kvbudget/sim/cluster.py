"""The cluster: replicas behind a router, run by the one driver (:mod:`kvbudget.sim.driver`).

:func:`simulate` builds the replicas, sorts the workload by arrival, hands it to
:class:`~kvbudget.sim.driver.Driver` and collects a :class:`~kvbudget.sim.results.SimResult`
in the workload's order. Requests that cannot fit any replica are reported as unfinished with
the reason; so are requests still in flight at ``max_simulated_s``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kvbudget.errors import ConfigError, KvbudgetError
from kvbudget.sim.cluster_run import ClusterRun, StreamedRun, trace_requests, trace_step
from kvbudget.sim.driver import DriveOptions, Driver, OnStep, ScaleOut
from kvbudget.sim.lifecycle import Crash, ScaleIn
from kvbudget.sim.lockstep import LockstepGroup
from kvbudget.sim.replica import KVSample, Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest, RequestIn, SimRequest
from kvbudget.sim.request_result import RequestResult, not_run_result
from kvbudget.sim.results import RunStats, SimResult
from kvbudget.sim.router import Router
from kvbudget.sim.stepped import SteppedReplica
from kvbudget.sim.tiers import Tier, TierConfig


@dataclass(slots=True)
class ClusterSpec:
    """Replicas, router and run options."""

    setups: list[ReplicaSetup]
    router: str = "round_robin"
    stale_s: float = 0.0
    scale_out: list[ScaleOut] = field(default_factory=list)
    sample_every_s: float | None = None
    remote_tier: TierConfig | None = None
    max_simulated_s: float | None = None
    trace: bool = False
    #: closed loop: this many requests in flight; the next one arrives when one finishes
    concurrency: int | None = None
    #: scale-in and crash events (kvbudget.sim.lifecycle); their replicas run the explicit engine
    scale_in: list[ScaleIn] = field(default_factory=list)
    crashes: list[Crash] = field(default_factory=list)
    #: keep every output token's time (``RequestResult.token_times_s``, records, ITL figures)
    record_token_times: bool = False
    #: data-parallel MoE: consecutive replicas form lockstep groups of this many, each behind
    #: its own ``router`` (:mod:`kvbudget.sim.lockstep`); 1: every replica steps on its own
    lockstep_size: int = 1


def simulate(requests: Sequence[RequestIn], spec: ClusterSpec, *, seed: int = 0) -> SimResult:
    """Run the whole workload through the cluster and collect every request's result.

    The results come back in the workload's order. Python's cyclic garbage collector is paused
    for the run (the simulator builds no reference cycles; reference counting frees
    everything): it saves 10-15% on large runs.
    """
    with _no_gc():
        return _simulate(requests, spec, seed=seed)


def simulate_stream(
    requests: Iterable[RequestIn],
    spec: ClusterSpec,
    *,
    seed: int = 0,
    on_result: Callable[[RequestResult], None] | None = None,
    on_sample: Callable[[KVSample], None] | None = None,
) -> StreamedRun:
    """Run a request stream (in arrival order) keeping only the summary's accumulator.

    Each request's result goes to ``on_result`` when it is known (finish order; refused ones at
    arrival, unfinished ones at the end) and each state sample to ``on_sample``, so memory stays
    flat in the number of requests. Same simulation as :func:`simulate` (same seed, same
    results); ``spec.trace`` is refused (the Chrome trace is held whole: use :func:`simulate`).
    """
    if spec.trace:
        raise ConfigError(
            "trace: a streamed run keeps no trace; drop --trace-out or run a smaller workload",
            field="trace",
        )
    stats = RunStats()

    def result(r: RequestResult) -> None:
        stats.add(r)
        if on_result is not None:
            on_result(r)

    def sample(x: KVSample) -> None:
        stats.add_sample(x)
        if on_sample is not None:
            on_sample(x)

    with _no_gc():
        run = _run(requests, spec, seed=seed, on_result=result, on_sample=sample)
    return StreamedRun(run, stats, spec.router)


@contextmanager
def _no_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run(
    requests: Iterable[RequestIn],
    spec: ClusterSpec,
    *,
    seed: int,
    on_result: Callable[[RequestResult], None],
    on_sample: Callable[[KVSample], None] | None = None,
    on_step: OnStep[SteppedReplica[SimRequest]] | None = None,
) -> ClusterRun:
    """Build the replicas, drive them, hand every request's result to ``on_result``."""
    if not spec.setups:
        raise ConfigError("replicas: need at least one replica", field="replicas")
    wall0 = time.perf_counter()
    seeds = np.random.SeedSequence(seed)
    shared: tuple[Tier, ...] = ()
    if spec.remote_tier is not None:
        cfg0 = spec.setups[0].config
        shared = (Tier(spec.remote_tier, cfg0.kv_bytes_per_token * cfg0.block_size),)
    replicas: list[Replica] = []

    def build(setup: ReplicaSetup, ready_s: float) -> Replica:
        index = len(replicas)
        rng = np.random.default_rng(seeds.spawn(1)[0])
        if spec.record_token_times:
            setup = replace(setup, record_token_times=True)
        if shared:
            setup = replace(setup, shared_tiers=shared)
        return Replica(f"replica-{index}", setup, rng, ready_s=ready_s)

    setups = list(spec.setups)
    if spec.scale_in or spec.crashes:
        transfers = any(e.on_deadline == "transfer" for e in spec.scale_in)
        setups = [replace(s, fast_path=False, accepts_transfers=transfers) for s in setups]
    for setup in setups:
        replicas.append(build(setup, 0.0))
    groups = _lockstep_groups(spec, replicas)
    stepped: list[SteppedReplica[SimRequest]] = list(groups) if groups else list(replicas)
    last_finish = 0.0

    def finish(r: RequestResult) -> None:
        nonlocal last_finish
        if r.finish_s is not None and r.finish_s > last_finish:
            last_finish = r.finish_s
        on_result(r)

    def on_finish(req: SimRequest, stepped: SteppedReplica[SimRequest]) -> None:
        rep = stepped.member_of(req) if isinstance(stepped, LockstepGroup) else _paged(stepped)
        times = rep.token_times
        if times is None:
            finish(RequestResult.from_sim(req, rep.name))
        else:
            kept = tuple(times.pop(req.request_id, ()))
            finish(RequestResult.from_sim(req, rep.name, None, kept))

    def on_reject(req: EngineRequest, rep: SteppedReplica[SimRequest], exc: KvbudgetError) -> None:
        name = rep.last_member.name if isinstance(rep, LockstepGroup) else rep.name
        on_result(not_run_result(req, name, f"rejected: {exc}"))

    def on_not_run(req: EngineRequest) -> None:
        on_result(not_run_result(req, "", "horizon: not arrived"))

    def sample(rep: SteppedReplica[SimRequest], now_s: float) -> None:
        rep.sample(now_s)

    def sample_out(rep: SteppedReplica[SimRequest], now_s: float) -> None:
        assert on_sample is not None
        if isinstance(rep, LockstepGroup):
            for x in rep.snapshots(now_s):
                on_sample(x)
        else:
            on_sample(_paged(rep).snapshot(now_s))

    # lockstep groups route inside (each its own router): the driver sees one engine a group
    router = Router("round_robin" if groups else spec.router, stale_s=spec.stale_s)
    driver = Driver(
        stepped,
        router,
        on_finish=on_finish,
        on_reject=on_reject,
        on_not_run=on_not_run,
        on_step=on_step,
        on_sample=sample if on_sample is None else sample_out,
        build=build,
    )
    outcome = driver.run(
        requests,
        DriveOptions(
            concurrency=spec.concurrency,
            max_simulated_s=spec.max_simulated_s,
            sample_every_s=spec.sample_every_s,
        ),
        scale_out=spec.scale_out,
        events=[*spec.scale_in, *spec.crashes],
    )
    for rep in replicas:
        for r in rep.unfinished():
            finish(RequestResult.from_sim(r, rep.name, f"horizon: {r.status}"))
    lifecycle = driver.lifecycle.as_dict() if spec.scale_in or spec.crashes else {}
    return ClusterRun(
        replicas, router, outcome, wall0, spec.max_simulated_s, last_finish, lifecycle, groups
    )


def _paged(rep: SteppedReplica[SimRequest]) -> Replica:
    assert isinstance(rep, Replica)
    return rep


def _lockstep_groups(spec: ClusterSpec, replicas: list[Replica]) -> list[LockstepGroup]:
    """``spec.lockstep_size`` > 1: the replicas in consecutive groups of that many, each
    behind its own ``spec.router`` (none: every replica steps on its own)."""
    size = spec.lockstep_size
    if size <= 1:
        return []
    if len(replicas) % size:
        raise ConfigError(
            f"lockstep_size: {len(replicas)} replicas do not split into groups of {size}",
            field="lockstep_size",
        )
    for name, given in (
        ("scale_out", spec.scale_out),
        ("scale_in", spec.scale_in),
        ("crashes", spec.crashes),
    ):
        if given:
            raise ConfigError(
                f"{name}: not modelled for data-parallel engines stepping in lockstep (a MoE "
                f"model with data_parallel_size > 1); drop {name}",
                field=name,
            )
    return [
        LockstepGroup(
            f"dp-group-{i // size}",
            replicas[i : i + size],
            Router(spec.router, stale_s=spec.stale_s),
        )
        for i in range(0, len(replicas), size)
    ]


def _simulate(requests: Sequence[RequestIn], spec: ClusterSpec, *, seed: int) -> SimResult:
    # sorted as given: the driver converts each request once, when it arrives
    ordered = sorted(((r, i) for i, r in enumerate(requests)), key=lambda x: (x[0].arrival_s, x[1]))
    results: list[RequestResult] = []
    trace: list[dict[str, Any]] = []

    def on_step(rep: SteppedReplica[SimRequest], index: int, now: float, duration: float) -> None:
        if isinstance(rep, LockstepGroup):  # one span a member, under the member's index
            size = len(rep.members)
            for j, m in enumerate(rep.members):
                trace.append(trace_step(m, index * size + j, now, duration))
        else:
            trace.append(trace_step(_paged(rep), index, now, duration))

    run = _run(
        (r for r, _ in ordered),
        spec,
        seed=seed,
        on_result=results.append,
        on_step=on_step if spec.trace else None,
    )
    order = {r.request_id: i for i, (r, _) in enumerate(ordered)}
    results.sort(key=lambda r: order.get(r.request_id, len(order)))
    replicas = run.replicas
    if spec.trace:
        trace.extend(trace_requests(results, {rep.name: i for i, rep in enumerate(replicas)}))
    samples = [s for rep in replicas for s in rep.samples]
    stats = RunStats()
    for r in results:
        stats.add(r)
    for x in samples:
        stats.add_sample(x)
    return SimResult(
        timing_model="+".join(sorted({rep.timing.name for rep in replicas})),
        requests=results,
        replica_stats={rep.name: rep.core.stats() for rep in replicas},
        samples=samples,
        tier_stats=run.tier_stats(),
        num_gpu_blocks={rep.name: rep.config.num_gpu_blocks for rep in replicas},
        simulated_s=run.simulated_s,
        wall_s=time.perf_counter() - run.wall0,
        num_steps=sum(rep.core.num_steps for rep in replicas),
        num_events=run.outcome.num_events,
        router=spec.router,
        router_fallbacks=run.router_fallbacks,
        trace_events=trace,
        notes=run.notes(stats),
        lifecycle=run.lifecycle,
        lockstep=run.lockstep_stats(),
    )
