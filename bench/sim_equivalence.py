"""Digest of simulator results over varied scenarios, to compare two source trees.

A speed change must not change results. Run this on the tree before and after a change and
compare the lines (same seed -> same per-request results, replica stats, tier stats and step
counts -> same digest)::

    PYTHONPATH=/tmp/old-tree/src .venv/bin/python bench/sim_equivalence.py > before.txt
    .venv/bin/python bench/sim_equivalence.py > after.txt
    diff before.txt after.txt

Scenarios: the issue's workload on the fast path and on the explicit engine; shared prefixes on a
small pool (evictions, preemptions) with salts and cancellations, fast and explicit; sha256
hashing; a sliding-window group (fast and explicit, with and without caching); Gemma-3-27B's
groups on a small pool with salts and cancellations (fast and explicit); a CPU tier (fast and
explicit); four replicas behind the cost router; no caching. Each line: scenario, digest,
preemptions, prefix-cache hit tokens, steps (all simulated). The last four lines say whether a
scenario gives the same digest on the fast path and on the explicit engine (it must). The
shared-prefix one: the fast path once gave 128 fewer hit tokens there, before its
completed-vs-cancelled free order was fixed on 2026-11-30. ``sliding``, ``gemma3_small`` and
``tier_cpu`` run on the fast path since 2026-12-01, and ``priority_small`` (priority scheduling,
three levels, on the shared-prefix workload and small pool) since 2026-12-01 too; each also runs
on the explicit engine in the same run (``*_explicit``), and the last lines compare the two.

Kept output: ``bench/results/sim_equivalence.txt`` is this script's output on the commit named
in its first line (a ``#`` comment); compare a later tree to it with::

    diff <(tail -n +2 bench/results/sim_equivalence.txt) after.txt
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

import numpy as np

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import KVGroupConfig
from kvbudget.sim.fromplan import plan_replica
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.results import SimResult
from kvbudget.sim.tiers import TierConfig


def make_requests(
    n: int,
    rate: float,
    seed: int,
    *,
    shared: bool = False,
    salt: bool = False,
    cancel: bool = False,
    priority: bool = False,
) -> list[EngineRequest]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n))
    prefixes = [
        tuple(rng.integers(0, 32000, size=int(rng.integers(100, 700))).tolist()) for _ in range(5)
    ]
    out = []
    for i in range(n):
        num_prompt = int(rng.integers(20, 1200)) if shared else 1024
        tokens = tuple(rng.integers(0, 32000, size=num_prompt).tolist())
        if shared:
            tokens = prefixes[int(rng.integers(0, 5))] + tokens
        out.append(
            EngineRequest(
                f"r{i}",
                tokens,
                int(rng.integers(1, 300)) if shared else 128,
                arrival_s=float(arrivals[i]),
                cache_salt=f"s{i % 2}" if salt and i % 3 == 0 else None,
                cancel_after_tokens=int(rng.integers(1, 50)) if cancel and i % 4 == 0 else None,
                priority=(i * 7) % 3 if priority else 0,
            )
        )
    return out


def _row(r: Any) -> str:
    fields = asdict(r)
    if not fields.get("token_times_s"):  # not recorded here: the digest as before the field
        fields.pop("token_times_s", None)
    return json.dumps(fields, sort_keys=True, default=str)


def digest(res: SimResult) -> tuple[str, int, int, int]:
    rows = [_row(r) for r in res.requests]
    stats = {k: repr(v) for k, v in res.replica_stats.items()}
    text = "\n".join(rows) + json.dumps(stats, sort_keys=True)
    text += repr(res.tier_stats) + str(res.num_steps)
    s = res.summary()
    return (
        hashlib.sha256(text.encode()).hexdigest()[:16],
        s["num_preemptions"],
        s["prefix_cache_hits_tokens"],
        s["num_steps"],
    )


def main() -> None:
    _, cfg, roofline = plan_replica(PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM"))
    small = cfg.model_copy(update={"num_gpu_blocks": 700})
    sliding = small.model_copy(
        update={
            "kv_groups": (KVGroupConfig(), KVGroupConfig(kind="sliding", sliding_window_tokens=256))
        }
    )
    # Gemma-3-27B at TP 2 (six sliding groups with a 1,024-token window, one full group) on a
    # pool small enough to preempt
    _, gemma3, gemma_roofline = plan_replica(
        PlanRequest(model="google/gemma-3-27b-it", gpu="H100-SXM", tp=2)
    )
    gemma3 = gemma3.model_copy(update={"num_gpu_blocks": 3000})
    cpu = TierConfig(name="cpu", capacity_bytes=4 * 2**30, bandwidth_bytes_per_s=2e10)
    mixed: dict[str, Any] = {"shared": True, "salt": True, "cancel": True}
    cases: dict[str, tuple[list[EngineRequest], list[ReplicaSetup], dict[str, Any]]] = {
        "issue_fast": (make_requests(1500, 22.4, 1), [ReplicaSetup(cfg, roofline)], {}),
        "issue_explicit": (
            make_requests(400, 22.4, 1),
            [ReplicaSetup(cfg, roofline, fast_path=False)],
            {},
        ),
        "shared_small_fast": (
            make_requests(800, 40, 2, **mixed),
            [ReplicaSetup(small, roofline)],
            {},
        ),
        "shared_small_explicit": (
            make_requests(800, 40, 2, **mixed),
            [ReplicaSetup(small, roofline, fast_path=False)],
            {},
        ),
        "shared_sha256": (
            make_requests(300, 40, 3, shared=True),
            [ReplicaSetup(small.model_copy(update={"hash_algo": "sha256"}), roofline)],
            {},
        ),
        "sliding": (make_requests(300, 40, 4, shared=True), [ReplicaSetup(sliding, roofline)], {}),
        "sliding_explicit": (
            make_requests(300, 40, 4, shared=True),
            [ReplicaSetup(sliding, roofline, fast_path=False)],
            {},
        ),
        "sliding_nocache": (
            make_requests(300, 40, 4, shared=True),
            [ReplicaSetup(sliding.model_copy(update={"enable_prefix_caching": False}), roofline)],
            {},
        ),
        "gemma3_small": (
            make_requests(300, 20, 8, **mixed),
            [ReplicaSetup(gemma3, gemma_roofline)],
            {},
        ),
        "gemma3_small_explicit": (
            make_requests(300, 20, 8, **mixed),
            [ReplicaSetup(gemma3, gemma_roofline, fast_path=False)],
            {},
        ),
        "tier_cpu": (
            make_requests(500, 40, 5, shared=True),
            [ReplicaSetup(small, roofline, tiers=(cpu,))],
            {},
        ),
        "tier_cpu_explicit": (
            make_requests(500, 40, 5, shared=True),
            [ReplicaSetup(small, roofline, tiers=(cpu,), fast_path=False)],
            {},
        ),
        "priority_small": (
            make_requests(800, 40, 2, priority=True, **mixed),
            [ReplicaSetup(small.model_copy(update={"policy": "priority"}), roofline)],
            {},
        ),
        "priority_small_explicit": (
            make_requests(800, 40, 2, priority=True, **mixed),
            [
                ReplicaSetup(
                    small.model_copy(update={"policy": "priority"}), roofline, fast_path=False
                )
            ],
            {},
        ),
        "cost4": (
            make_requests(800, 80, 6, shared=True),
            [ReplicaSetup(small, roofline)] * 4,
            {"router": "cost"},
        ),
        "nocache": (
            make_requests(800, 40, 7, shared=True),
            [ReplicaSetup(small.model_copy(update={"enable_prefix_caching": False}), roofline)],
            {},
        ),
    }
    digests: dict[str, str] = {}
    for name, (requests, setups, kwargs) in cases.items():
        row = digest(simulate(requests, ClusterSpec(setups, **kwargs), seed=0))
        digests[name] = row[0]
        print(name, *row, flush=True)
    # same workload, fast path vs explicit stepping: must be identical (docs/simulator.md)
    same = digests["shared_small_fast"] == digests["shared_small_explicit"]
    print("shared_small fast == explicit:", "identical" if same else "DIFFERENT", flush=True)
    for name in ("sliding", "gemma3_small", "tier_cpu", "priority_small"):
        same = digests[name] == digests[f"{name}_explicit"]
        print(f"{name} fast == explicit:", "identical" if same else "DIFFERENT", flush=True)


if __name__ == "__main__":
    main()
