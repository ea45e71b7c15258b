"""The engine's pod template: resources, probes, drain, shared memory, topology hints.

Numbers and where they come from:

* ``nvidia.com/gpu`` = TP x PP on one node (``gpus_per_node`` per pod when multi-node);
* CPU and memory: :mod:`kvbudget.deploy.memory` (request = limit, integer CPUs: Guaranteed QoS);
* startupProbe: ``failureThreshold x periodSeconds`` >= the load time x ``STARTUP_MARGIN``
  (measured by a rollback drill when the report has one, else estimated from the weight bytes);
* readinessProbe on the engine's health path; an optional readiness gate
  ``kvbudget.io/warm-prefix`` that a warm-up job sets once the shared prefixes are cached
  (the health endpoint says nothing about cache warmth, seed §8.1);
* preStop sleep >= the accepted p99 end-to-end time (in-flight streams finish after the pod left
  the endpoints), then SIGTERM; terminationGracePeriodSeconds covers both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvbudget.deploy.engine_args import EngineCommand
from kvbudget.deploy.k8s_checks import command_literal
from kvbudget.deploy.memory import HostBudget
from kvbudget.deploy.source import Figure

STARTUP_PERIOD_S = 10
STARTUP_MARGIN = 1.5
#: seconds between the preStop drain and the kill, for the engine's own shutdown
SHUTDOWN_S = 30
DRAIN_EXTRA_S = 5
WARM_PREFIX_GATE = "kvbudget.io/warm-prefix"


@dataclass(frozen=True, slots=True)
class PodExtras:
    """What the pod needs beyond the engine: the weights' volumes, mounts and environment
    (:mod:`kvbudget.deploy.model_source`) and the GPU-product node selector
    (:mod:`kvbudget.deploy.placement`)."""

    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    env: tuple[dict[str, Any], ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodTiming:
    load_time: Figure
    e2e_p99: Figure
    startup_failure_threshold: int
    drain_s: int
    grace_s: int

    def lines(self) -> list[str]:
        return [
            f"load time: {self.load_time.text(' s')}",
            f"startupProbe: periodSeconds {STARTUP_PERIOD_S} x failureThreshold "
            f"{self.startup_failure_threshold} = {STARTUP_PERIOD_S * self.startup_failure_threshold}"
            f" s >= {STARTUP_MARGIN:g} x load time",
            f"p99 end-to-end the drain covers: {self.e2e_p99.text(' s')}",
            f"preStop drain: {self.drain_s} s = ceil(p99 e2e) + {DRAIN_EXTRA_S} s",
            f"terminationGracePeriodSeconds: {self.grace_s} s = drain + {SHUTDOWN_S} s engine "
            "shutdown",
        ]


def pod_timing(load_time: Figure, e2e_p99: Figure) -> PodTiming:
    threshold = max(3, math.ceil(load_time.value * STARTUP_MARGIN / STARTUP_PERIOD_S))
    drain = math.ceil(e2e_p99.value) + DRAIN_EXTRA_S
    return PodTiming(load_time, e2e_p99, threshold, drain, drain + SHUTDOWN_S)


def _probe(cmd: EngineCommand, *, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": cmd.health_path, "port": "http"},
        "periodSeconds": period_s,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def engine_container(
    cmd: EngineCommand,
    *,
    image: str,
    budget: HostBudget,
    gpus: int,
    timing: PodTiming,
    argv: list[str] | None = None,
    probes: bool = True,
    extras: PodExtras | None = None,
) -> dict[str, Any]:
    resources = {
        "cpu": str(budget.cpu),
        "memory": budget.memory_quantity,
        "nvidia.com/gpu": str(gpus),
    }
    container: dict[str, Any] = {
        "name": "engine",
        "image": image,
        # argv (LeaderWorkerSet) is already escaped; its $(LWS_*) references are meant
        "command": list(argv) if argv is not None else [command_literal(a) for a in cmd.argv],
        "ports": [{"name": "http", "containerPort": cmd.port, "protocol": "TCP"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "lifecycle": {"preStop": {"sleep": {"seconds": timing.drain_s}}},
    }
    if probes:
        container["startupProbe"] = _probe(
            cmd, period_s=STARTUP_PERIOD_S, failures=timing.startup_failure_threshold
        )
        container["readinessProbe"] = _probe(cmd, period_s=5, failures=3)
        container["livenessProbe"] = _probe(cmd, period_s=10, failures=6)
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}] if budget.shm_bytes else []
    mounts += [dict(m) for m in (extras.mounts if extras else ())]
    if mounts:
        container["volumeMounts"] = mounts
    if extras and extras.env:
        container["env"] = [dict(e) for e in extras.env]
    return container


def pod_spec(
    container: dict[str, Any],
    *,
    budget: HostBudget,
    timing: PodTiming,
    warm_prefix_gate: bool,
    extras: PodExtras | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": timing.grace_s,
        "containers": [container],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    volumes: list[dict[str, Any]] = []
    if budget.shm_bytes:
        volumes.append(
            {
                "name": "dshm",
                "emptyDir": {
                    "medium": "Memory",
                    "sizeLimit": f"{math.ceil(budget.shm_bytes / 1024**3)}Gi",
                },
            }
        )
    volumes += [dict(v) for v in (extras.volumes if extras else ())]
    if volumes:
        spec["volumes"] = volumes
    if extras and extras.node_selector:
        spec["nodeSelector"] = dict(extras.node_selector)
    if warm_prefix_gate:
        spec["readinessGates"] = [{"conditionType": WARM_PREFIX_GATE}]
    return spec


TOPOLOGY_NOTES = (
    "Four or eight free GPUs are not necessarily a well-connected group: they may span CPU NUMA "
    "domains, PCIe root complexes, or sit at different distances from the RDMA NIC. Check "
    "`nvidia-smi topo -m`, NUMA information and measured bandwidth before go-live.",
    "requests = limits with integer CPUs makes the pod Guaranteed QoS; only the kubelet's CPU "
    "manager `static` policy then pins whole cores to it. YAML alone does not turn that on.",
    "Topology Manager (`topologyManagerPolicy` restricted or single-numa-node, "
    "`topologyManagerScope: pod`) aligns the CPUs with the GPUs' device-plugin hints.",
    "`single-numa-node` refuses admission (TopologyAffinityError) when the GPUs, CPUs and memory "
    "cannot all come from one NUMA node, which 8-GPU pods usually cannot; prefer `restricted` "
    "or `best-effort` there, and know that NUMA alignment does not optimise NVLink bandwidth.",
    "Keep the NIC used for KV transfer or multi-node traffic on the GPUs' NUMA node (device "
    "plugin / DRA attributes); KV offload and P/D amplify GPU-CPU-NIC path effects.",
)
