"""Probe a load on the simulator, in process: a fresh set of simulated replicas per probe.

Replicas are built as ``kvbudget sim`` builds them (:func:`kvbudget.sim.scenario.replica_setup`:
the plan's KV pool, the roofline or a calibrated profile) and run through the acceptance's
simulated target (:class:`kvbudget.accept.targets.sim.SimTarget`), which records every output
token's time, so ITL is judged too. Every figure is *simulated*; the timing model is named.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbudget.accept.targets.base import Target, TargetInfo
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.errors import ConfigError
from kvbudget.maxload.probe import TargetProbe
from kvbudget.maxload.slo import Slo
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.scenario import SimScenario, lockstep_size, replica_built

#: scenario fields a load search cannot honour (one replica set, steady load), and why
_REFUSED = {
    "replica_overrides": "heterogeneous replicas",
    "scale_out": "scale-out events",
    "scale_in": "scale-in events",
    "crashes": "crash events",
    "disaggregation": "P/D disaggregation",
    "remote_tier": "a remote tier shared by replicas",
}


class SimProbe(TargetProbe):
    """A :class:`TargetProbe` on fresh identical simulated replicas for every probe."""

    def __init__(
        self,
        setup: ReplicaSetup,
        workload: dict[str, Any],
        slo: Slo,
        *,
        num_requests: int,
        num_replicas: int = 1,
        router: str = "round_robin",
        lockstep: int = 1,
    ) -> None:
        self.setup = setup
        self.timing_model = setup.timing.name
        info = TargetInfo(kind="sim", source="simulated", label="kvbudget capacity probe")

        def make_target(seed: int) -> Target:
            return SimTarget(
                setup.config,
                setup.timing,
                np.random.default_rng(seed),
                info=info,
                hash_prompts=False,
                tiers=setup.tiers,
                num_replicas=num_replicas,
                router=router,
                lockstep_size=lockstep,
            )

        super().__init__(make_target, workload, slo, num_requests=num_requests)

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
        built = replica_built(scenario, None)
        return cls(
            built.setup,
            scenario.workload,
            slo,
            num_requests=num_requests,
            num_replicas=scenario.replicas * scenario.data_parallel_size,
            router=scenario.router,
            # a MoE model's data-parallel engines step in lockstep (kvbudget.sim.lockstep)
            lockstep=lockstep_size(scenario, built),
        )
