"""The ``sim`` target: simulated replicas in virtual time, run by the simulator's driver.

One replica (``sim.replica.Replica``, built by ``sim.fromplan.build_replica`` through
:mod:`kvbudget.accept.targets.capacity`), or ``target.replicas`` identical ones behind the simulator's
router (:mod:`kvbudget.sim.router`, the policy ``lock.router_policy``), serves the whole
acceptance run (warm-up, then the cells in order), so the prefix caches carry over between
cells as they would on real servers. Each cell is one :meth:`kvbudget.sim.driver.Driver.run`
and its figures are on its own timeline starting at 0:

* closed loop (``closed_loop_concurrency`` given): that many requests in flight; a finished
  request is replaced by the next one until ``duration_s`` has passed or the list is used up;
* open loop: each request enters at its planned ``arrival_s``.

A request the engine can never fit (longer than ``max_model_len`` or than the whole KV pool)
is recorded as an error and reported as the cell's capacity error.

Every output token's time is recorded (``token_times_s``, the end of the engine step that
produced it), so ITL is reported (``ReplicaSetup.record_token_times``; the lazy-decode fast
path gives a decoder's tokens the ends of its steps). With several replicas the KV /
queue samples and the engine counters are the cluster's totals (KV usage: used blocks over all
blocks) and each record names its replica. ``lockstep_size`` > 1 (a MoE model's data-parallel
engines, as ``kvbudget capacity --dp`` builds them): consecutive replicas step in lockstep
groups (:mod:`kvbudget.sim.lockstep`), each group routing its requests with the router.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kvbudget.accept.targets.base import CellRun, TargetInfo
from kvbudget.accept.targets.tier_meter import TierMeter
from kvbudget.errors import ConfigError, KvbudgetError, SimulationError
from kvbudget.records import MetricSample, RequestRecord
from kvbudget.records.simulated import ended_as, simulated_record
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.driver import DriveOptions, Driver
from kvbudget.sim.lockstep import LockstepGroup
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest, SimRequest, as_engine_request
from kvbudget.sim.router import Router
from kvbudget.sim.stepped import SteppedReplica
from kvbudget.sim.tiers import TierConfig, TierStack
from kvbudget.sim.timing import StepTimeModel
from kvbudget.workload.request import PlannedRequest

#: hard bound on engine steps per cell (a runaway guard, far above any planned cell)
MAX_STEPS_PER_CELL = 2_000_000
#: keep a KV/queue sample this often (virtual seconds)
SAMPLE_EVERY_S = 0.2


def _member(stepped: SteppedReplica[SimRequest], req: SimRequest) -> Replica:
    """The replica that ran ``req`` (a lockstep group's member, or the replica itself)."""
    if isinstance(stepped, LockstepGroup):
        return stepped.member_of(req)
    assert isinstance(stepped, Replica)
    return stepped


def _prompt_sha256(prompt_token_ids: Sequence[int]) -> str:
    """sha256 of the prompt's token ids as little-endian uint32 (``"ids:"`` prefixed).

    Simulated prompts are synthetic token sequences; hashing the ids instead of the decoded text
    saves decoding every prompt (a fifth of a run's CPU). HTTP records hash the text instead.
    """
    ids = np.asarray(prompt_token_ids, dtype="<u4").tobytes()
    return hashlib.sha256(b"ids:" + ids).hexdigest()


@dataclass(slots=True)
class _Cell:
    """One cell's bookkeeping while the driver runs it."""

    cell_id: str
    warmup: bool
    base_s: float
    planned: dict[str, PlannedRequest]
    records: list[RequestRecord] = field(default_factory=list)
    samples: list[MetricSample] = field(default_factory=list)
    capacity_error: str | None = None


def _totals(replicas: Sequence[Replica]) -> dict[str, float]:
    """The engine counters and state summed over ``replicas`` (KV usage: used / all blocks)."""
    out = dict.fromkeys(
        (
            "prefix_queries_tokens",
            "prefix_hits_tokens",
            "preemptions",
            "prompt_tokens",
            "generation_tokens",
            "num_running",
            "num_waiting",
            "num_free_blocks",
            "num_total_blocks",
            "used_blocks",
        ),
        0.0,
    )
    for rep in replicas:
        st = rep.core.stats()
        out["prefix_queries_tokens"] += st.prefix_cache_queries_tokens
        out["prefix_hits_tokens"] += st.prefix_cache_hits_tokens
        out["preemptions"] += st.num_preemptions
        out["prompt_tokens"] += st.prompt_tokens
        out["generation_tokens"] += st.generation_tokens
        out["num_running"] += st.num_running
        out["num_waiting"] += st.num_waiting
        out["num_free_blocks"] += st.num_free_blocks
        out["num_total_blocks"] += st.num_total_blocks
        out["used_blocks"] += st.kv_usage * st.num_total_blocks
    total = out["num_total_blocks"]
    out["kv_usage"] = out["used_blocks"] / total if total else 0.0
    return out


class SimTarget:
    """Drives the simulated replica(s); every record is ``source="simulated"``."""

    def __init__(
        self,
        config: ReplicaConfig,
        timing: StepTimeModel,
        rng: np.random.Generator,
        *,
        info: TargetInfo,
        hash_prompts: bool = True,
        tiers: Sequence[TierConfig] = (),
        num_replicas: int = 1,
        router: str = "round_robin",
        lockstep_size: int = 1,
    ) -> None:
        self.config = config
        if tiers and config.kv_bytes_per_token * config.block_size <= 0:
            raise ConfigError(
                "target.kv_tiers: the replica's KV bytes per token is unknown (0); tiers "
                "need it to size blocks; remove kv_tiers or plan from a catalog model",
                field="target.kv_tiers",
            )
        if num_replicas > 1 and tiers:
            raise ConfigError(
                "target.replicas: KV tiers are metered on one replica; remove kv_tiers or set "
                "target.replicas: 1",
                field="target.replicas",
            )
        self.setup = ReplicaSetup(
            config=config, timing=timing, tiers=tuple(tiers), record_token_times=True
        )
        # replica 0 draws from ``rng`` (one replica: as before); the others from its children
        rngs = [rng, *rng.spawn(num_replicas - 1)] if num_replicas > 1 else [rng]
        names = (
            [config.name] if num_replicas == 1 else [f"replica-{i}" for i in range(num_replicas)]
        )
        self.replicas = [Replica(name, self.setup, r) for name, r in zip(names, rngs, strict=True)]
        self.replica = self.replicas[0]
        #: the router's policy; ``None`` with one replica (nothing to choose)
        self.router: str | None = router if num_replicas > 1 else None
        self.tier_stack: TierStack | None = self.replica.tier_stack
        self._cell: _Cell | None = None
        self._meter: TierMeter | None = None
        size = lockstep_size
        if size > 1 and num_replicas % size:
            raise ConfigError(
                f"lockstep_size: {num_replicas} replicas do not split into groups of {size}",
                field="lockstep_size",
            )
        #: data-parallel lockstep groups (none: every replica steps on its own)
        self.groups = [
            LockstepGroup(f"dp-group-{i // size}", self.replicas[i : i + size], Router(router))
            for i in range(0, num_replicas, size)
            if size > 1
        ]
        stepped: list[SteppedReplica[SimRequest]] = (
            list(self.groups) if self.groups else list(self.replicas)
        )
        self._driver = Driver(
            stepped,
            Router("round_robin" if self.groups else router),
            on_finish=self._on_finish,
            on_reject=self._on_reject,
            on_step=self._on_step if self.tier_stack is not None else None,
            on_sample=self._on_sample,
        )
        self._info = info
        self._hash_prompts = hash_prompts
        self._clock_s = 0.0

    @property
    def info(self) -> TargetInfo:
        return self._info

    def idle_baseline(self) -> dict[str, float]:
        t = _totals(self.replicas)
        keys = ("kv_usage", "num_running", "num_waiting", "num_free_blocks", "num_total_blocks")
        return {k: t[k] for k in keys}

    def close(self) -> None:
        return None

    # ------------------------------------------------------------------ driver callbacks
    def _on_finish(self, req: SimRequest, stepped: SteppedReplica[SimRequest]) -> None:
        rep = _member(stepped, req)
        cell = self._cell
        assert cell is not None
        base = cell.base_s
        planned = cell.planned[req.request_id]
        sent = req.spec.arrival_s - base
        times = rep.token_times.pop(req.request_id, []) if rep.token_times is not None else []
        queue_s = None
        if req.first_scheduled_s is not None:
            queue_s = max(0.0, req.first_scheduled_s - req.spec.arrival_s)
        cell.records.append(
            simulated_record(
                req.request_id,
                ended_as(req.status, req.finish_reason),
                finish_reason=req.finish_reason,
                cell_id=cell.cell_id,
                tenant=planned.tenant,
                replica=rep.name if self.router is not None else None,
                warmup=cell.warmup,
                scheduled_s=planned.arrival_s,
                sent_s=sent,
                first_token_s=None if req.first_token_s is None else req.first_token_s - base,
                done_s=(req.finish_s if req.finish_s is not None else base) - base,
                token_times_s=[round(t - base, 6) for t in times],
                prompt_tokens=req.num_prompt_tokens,
                output_tokens=req.num_output_tokens,
                cached_tokens=req.num_cached_tokens,
                preemptions=req.num_preemptions,
                queue_s=queue_s,
                prompt_sha256=(
                    _prompt_sha256(req.spec.prompt_token_ids) if self._hash_prompts else None
                ),
            )
        )

    def _on_reject(
        self, req: EngineRequest, stepped: SteppedReplica[SimRequest], exc: KvbudgetError
    ) -> None:
        rep = stepped.last_member if isinstance(stepped, LockstepGroup) else stepped
        cell = self._cell
        assert cell is not None
        message = str(exc)
        cell.capacity_error = cell.capacity_error or message
        now = req.arrival_s - cell.base_s
        planned = cell.planned[req.request_id]
        cell.records.append(
            simulated_record(
                req.request_id,
                "error",
                error=message,
                cell_id=cell.cell_id,
                tenant=planned.tenant,
                replica=rep.name if self.router is not None else None,
                warmup=cell.warmup,
                scheduled_s=planned.arrival_s,
                sent_s=now,
                done_s=now,
                prompt_tokens=req.num_prompt_tokens,
            )
        )

    def _on_step(
        self, rep: SteppedReplica[SimRequest], index: int, now_s: float, duration_s: float
    ) -> None:
        if self._meter is not None:
            self._meter.observe()

    def _on_sample(self, rep: SteppedReplica[SimRequest], now_s: float) -> None:
        # the driver samples every replica (or group) at the same instant, first to last: one
        # cluster sample when it asks for the first one
        if rep is not self._driver.replicas[0]:
            return
        cell = self._cell
        assert cell is not None
        totals = _totals(self.replicas)
        t = now_s - cell.base_s
        cell.samples.extend(
            MetricSample(timestamp_s=t, name=name, value=totals[name])
            for name in ("kv_usage", "num_running", "num_waiting")
        )

    # ------------------------------------------------------------------ one cell
    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
    ) -> CellRun:
        """Drive the cell on its own timeline (0 at its start) on the persistent replica."""
        base = self._clock_s
        start = _totals(self.replicas)
        self._meter = TierMeter(self.tier_stack) if self.tier_stack is not None else None
        ordered = sorted(requests, key=lambda r: r.arrival_s)
        closed = closed_loop_concurrency is not None
        cell = _Cell(cell_id, warmup, base, {r.request_id: r for r in ordered})
        self._cell = cell
        # closed loop: the first requests are all sent at the cell's start, the next ones
        # when a request ends; open loop: each at its planned arrival
        stream = (
            as_engine_request(r, arrival_s=base if closed else base + r.arrival_s) for r in ordered
        )
        try:
            outcome = self._driver.run(
                stream,
                DriveOptions(
                    concurrency=closed_loop_concurrency,
                    admit_until_s=None if duration_s is None else base + duration_s,
                    sample_every_s=SAMPLE_EVERY_S,
                    start_s=base,
                    max_steps=MAX_STEPS_PER_CELL,
                ),
            )
        except SimulationError as exc:
            raise SimulationError(
                f"cell {cell_id}: {exc}; reduce max_requests_per_cell or the tier durations"
            ) from None
        finally:
            self._cell = None
        stuck_on = [r.unfinished()[0] for r in self.replicas if r.unfinished()]
        if stuck_on:
            stuck = stuck_on[0]
            raise SimulationError(
                f"cell {cell_id}: the engine stalled with work queued (request "
                f"{stuck.request_id} is {stuck.status})"
            )
        # anything left in the queue of a closed loop after the duration is simply not sent
        now = outcome.last_activity_s - base
        self._clock_s = base + now
        end = _totals(self.replicas)
        counters = {
            key: end[key] - start[key]
            for key in (
                "prefix_queries_tokens",
                "prefix_hits_tokens",
                "preemptions",
                "prompt_tokens",
                "generation_tokens",
            )
        }
        if self._meter is not None:
            counters.update(self._meter.counters(now))
        self._meter = None
        return CellRun(
            records=cell.records,
            duration_s=now,
            samples=cell.samples,
            capacity_error=cell.capacity_error,
            counters=counters,
            kv_usage_after_drain=end["kv_usage"],
        )
