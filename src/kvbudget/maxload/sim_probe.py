"""Probe a load on the simulator, in process: a fresh set of simulated replicas per probe.

Each probe generates ``num_requests`` requests of the scenario's workload (its lengths and
prefix sharing; the arrivals replaced by a Poisson process at the probed rate, or a closed
loop at the probed concurrency) and runs them on replicas built as ``kvbudget sim`` builds
them (:func:`kvbudget.sim.scenario.replica_setup`: the plan's KV pool, the roofline or a
calibrated profile), through the acceptance's simulated target
(:class:`kvbudget.accept.sim_target.SimTarget`), which records every output token's time, so
ITL is judged too. Every figure is *simulated*; the timing model is named.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbudget.accept.sim_target import SimTarget
from kvbudget.accept.targets import TargetInfo
from kvbudget.errors import ConfigError
from kvbudget.maxload.point import LoadKind, Point, judge
from kvbudget.maxload.slo import Slo
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.scenario import SimScenario, replica_setup
from kvbudget.workload.spec import generate, workload_from_dict

#: scenario fields a load search cannot honour (one replica set, steady load), and why
_REFUSED = {
    "replica_overrides": "heterogeneous replicas",
    "scale_out": "scale-out events",
    "scale_in": "scale-in events",
    "crashes": "crash events",
    "disaggregation": "P/D disaggregation",
    "remote_tier": "a remote tier shared by replicas",
}


class SimProbe:
    """``probe(kind, load, seed)`` -> :class:`Point` on identical simulated replicas."""

    def __init__(
        self,
        setup: ReplicaSetup,
        workload: dict[str, Any],
        slo: Slo,
        *,
        num_requests: int,
        num_replicas: int = 1,
        router: str = "round_robin",
    ) -> None:
        self.setup = setup
        self.workload = workload
        self.slo = slo
        self.num_requests = num_requests
        self.num_replicas = num_replicas
        self.router = router
        self.timing_model = setup.timing.name

    @classmethod
    def from_scenario(cls, scenario: SimScenario, slo: Slo, *, num_requests: int) -> SimProbe:
        for name, what in _REFUSED.items():
            if getattr(scenario, name):
                raise ConfigError(
                    f"scenario field {name}: kvbudget capacity searches one steady set of "
                    f"identical replicas and cannot model {what}; remove it (run kvbudget sim "
                    "for it)",
                    field=name,
                )
        return cls(
            replica_setup(scenario, None),
            scenario.workload,
            slo,
            num_requests=num_requests,
            num_replicas=scenario.replicas,
            router=scenario.router,
        )

    def longer(self, factor: int) -> SimProbe:
        """The same probe with ``factor`` times the requests (the rate's confirmation)."""
        return SimProbe(
            self.setup,
            self.workload,
            self.slo,
            num_requests=self.num_requests * factor,
            num_replicas=self.num_replicas,
            router=self.router,
        )

    def __call__(self, kind: LoadKind, load: float, seed: int) -> Point:
        if kind == "rate":
            arrivals: dict[str, Any] = {"kind": "poisson", "rate_per_s": load}
        else:
            arrivals = {"kind": "closed", "concurrency": int(load)}
        spec = workload_from_dict(
            {**self.workload, "num_requests": self.num_requests, "arrivals": arrivals}
        )
        requests = generate(spec, np.random.default_rng(seed))
        info = TargetInfo(kind="sim", source="simulated", label="kvbudget capacity probe")
        target = SimTarget(
            self.setup.config,
            self.setup.timing,
            np.random.default_rng(seed),
            info=info,
            hash_prompts=False,
            tiers=self.setup.tiers,
            num_replicas=self.num_replicas,
            router=self.router,
        )
        run = target.run_cell(
            requests,
            cell_id=f"{kind}={load:g}",
            closed_loop_concurrency=spec.closed_loop_concurrency,
            duration_s=None,
        )
        return judge(
            run.records,
            self.slo,
            kind=kind,
            load=load,
            seed=seed,
            duration_s=run.duration_s,
            num_preemptions=int(run.counters.get("preemptions", 0)),
            capacity_error=run.capacity_error,
        )
