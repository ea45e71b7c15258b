"""Per-pod CPU and host-memory requests, with the arithmetic shown term by term.

A GPU count says nothing about host DRAM (seed §8.1: ``nvidia.com/gpu: 4`` reserves no CPU
memory). The pod's memory limit must hold, at the same time:

* the weights load peak: safetensors are memory-mapped, and the page cache they fill counts
  against the pod's memory cgroup while the pod's ranks read them (every shard this pod loads);
* the CPU KV tier (``lock.offload`` for vLLM's native offloading, else a ``cpu`` tier of
  ``target.kv_tiers``): pinned (page-locked) host memory, never reclaimed or swapped;
* ``/dev/shm`` for tensor/pipeline parallelism (a memory-medium emptyDir is charged to the pod);
* a runtime allowance per GPU process (Python, CUDA host state, tokenizer), an assumption;
* sidecars;
* a headroom fraction on top.

CPU: an integer count (the CPU manager's static policy pins whole cores only for Guaranteed pods
with integer CPU requests), ``CPU_PER_GPU`` per GPU plus ``CPU_BASE``: assumptions, stated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.deploy.engine_args import offload_gib
from kvbudget.units import format_bytes

GIB = 1024**3
RUNTIME_BYTES_PER_GPU = 4 * GIB
RUNTIME_BYTES_BASE = 2 * GIB
HEADROOM_FRACTION = 0.10
CPU_PER_GPU = 4
CPU_BASE = 2
DEFAULT_SHM_BYTES = 8 * GIB
DEFAULT_SIDECAR_BYTES = 512 * 1024**2


@dataclass(frozen=True, slots=True)
class MemoryTerm:
    name: str
    num_bytes: int
    how: str


@dataclass(frozen=True, slots=True)
class HostBudget:
    terms: tuple[MemoryTerm, ...]
    headroom_bytes: int
    total_bytes: int
    cpu: int
    cpu_how: str
    shm_bytes: int

    @property
    def memory_quantity(self) -> str:
        """The Kubernetes quantity: whole GiB, rounded up."""
        return f"{math.ceil(self.total_bytes / GIB)}Gi"

    def lines(self) -> list[str]:
        out = [f"{t.name}: {format_bytes(t.num_bytes)} ({t.how})" for t in self.terms]
        out.append(f"headroom {HEADROOM_FRACTION:.0%}: {format_bytes(self.headroom_bytes)}")
        out.append(
            f"total: {format_bytes(self.total_bytes)} -> memory {self.memory_quantity} "
            "(request = limit)"
        )
        return out


def cpu_tier_bytes(plan: AcceptPlan, lock: ObjectLock) -> tuple[int, str] | None:
    gib = offload_gib(lock)
    if gib is not None:
        return int(gib * GIB), f"lock.offload {lock.offload.value} (vLLM --kv-offloading-size)"
    for tier in plan.target.kv_tiers:
        if tier.name == "cpu":
            return tier.capacity_bytes, "target.kv_tiers cpu capacity_bytes (the accepted tier)"
    return None


def host_budget(
    plan: AcceptPlan,
    lock: ObjectLock,
    *,
    weights_bytes: int,
    weights_how: str,
    gpus_per_pod: int,
    sidecar_bytes: int = DEFAULT_SIDECAR_BYTES,
    shm_bytes: int | None = None,
) -> HostBudget:
    """The memory and CPU one pod requests (``weights_bytes``: what this pod loads)."""
    parallel = (lock.tensor_parallel.value or 1) * (lock.pipeline_parallel.value or 1)
    shm = shm_bytes if shm_bytes is not None else (DEFAULT_SHM_BYTES if parallel > 1 else 0)
    terms = [MemoryTerm("weights load peak", weights_bytes, weights_how)]
    tier = cpu_tier_bytes(plan, lock)
    if tier is not None:
        terms.append(MemoryTerm("CPU KV tier (pinned)", tier[0], tier[1]))
    if shm:
        terms.append(
            MemoryTerm(
                "/dev/shm",
                shm,
                "memory-medium emptyDir for NCCL/IPC between ranks"
                + (" (--shm-size)" if shm_bytes is not None else ", assumed (--shm-size)"),
            )
        )
    terms.append(
        MemoryTerm(
            "runtime",
            RUNTIME_BYTES_BASE + RUNTIME_BYTES_PER_GPU * gpus_per_pod,
            f"assumed: {format_bytes(RUNTIME_BYTES_BASE)} + {format_bytes(RUNTIME_BYTES_PER_GPU)}"
            f" x {gpus_per_pod} GPU process(es)",
        )
    )
    if sidecar_bytes:
        terms.append(MemoryTerm("sidecars", sidecar_bytes, "--sidecar-memory"))
    subtotal = sum(t.num_bytes for t in terms)
    headroom = int(subtotal * HEADROOM_FRACTION)
    cpu = CPU_BASE + CPU_PER_GPU * max(gpus_per_pod, 1)
    cpu_how = f"assumed: {CPU_BASE} + {CPU_PER_GPU} x {gpus_per_pod} GPU(s), whole cores"
    return HostBudget(
        terms=tuple(terms),
        headroom_bytes=headroom,
        total_bytes=subtotal + headroom,
        cpu=cpu,
        cpu_how=cpu_how,
        shm_bytes=shm,
    )
