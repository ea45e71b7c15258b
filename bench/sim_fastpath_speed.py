"""Lazy-decode fast path vs explicit stepping on sliding-window (Gemma-style) replicas.

Same shape as ``bench/sim_speed.py`` (1,024 input and 128 output tokens, Poisson arrivals at
``LOAD`` x the replica's saturation throughput, measured first with an all-at-once burst in the
same simulator), on replicas with sliding-window KV groups, planned by ``make_plan`` on
H100-SXM: Gemma-2-9B (21 sliding layers with a 4,096-token window, 21 full; the window is
longer than every request) and Gemma-3-27B at TP 2 (52 sliding layers with a 1,024-token window
in six groups, 10 full; every request outgrows the window while it decodes), then Llama-3.1-8B
and Gemma-3-27B with a CPU tier (64 GiB at 25 GB/s, offload; these prompts share nothing, so
it is written on evictions and never reloaded: the fast path stays lazy). For each, the same
requests run on the fast path and on ``EngineCore`` stepped every step, in the same run: CPU
seconds (best of ``REPEATS``) and their ratio, and whether the per-request results are identical.

Run: ``.venv/bin/python bench/sim_fastpath_speed.py [--requests N] [--out result.json]``.
Figures are measurements of *simulator speed* on this machine; the simulated latencies inside
are roofline estimates, not measurements of an engine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.fromplan import plan_replica
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.tiers import TierConfig

#: a CPU tier (offload on GPU eviction), as in bench/sim_whatif.py: 64 GiB at 25 GB/s
CPU_TIER = TierConfig(name="cpu", capacity_bytes=64 * 2**30, bandwidth_bytes_per_s=25e9)
#: (model, TP, KV tiers)
MODELS: tuple[tuple[str, int, tuple[TierConfig, ...]], ...] = (
    ("google/gemma-2-9b", 1, ()),
    ("google/gemma-3-27b-it", 2, ()),
    ("meta-llama/Llama-3.1-8B", 1, (CPU_TIER,)),
    ("google/gemma-3-27b-it", 2, (CPU_TIER,)),
)


def _sim_speed() -> ModuleType:
    """``bench/sim_speed.py`` (its workload and timer), loaded by path."""
    path = Path(__file__).with_name("sim_speed.py")
    spec = importlib.util.spec_from_file_location("sim_speed", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--out", type=Path)
    opts = ap.parse_args()
    speed = _sim_speed()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    out: dict[str, Any] = {
        "what": "simulator speed (measured host time), fast path vs explicit stepping; "
        "simulated latencies are roofline estimates",
        "commit": commit or "unknown",
        "host": {"python": sys.version.split()[0], "machine": platform.machine(),
                 "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "workload": {"input_tokens": 1024, "output_tokens": 128, "load": speed.LOAD,
                     "requests": opts.requests, "repeats": speed.REPEATS},
    }  # fmt: skip
    rows = []
    for model, tp, tiers in MODELS:
        _, cfg, roofline = plan_replica(PlanRequest(model=model, gpu="H100-SXM", tp=tp))
        fast_setup = ReplicaSetup(cfg, roofline, tiers=tiers)
        explicit_setup = ReplicaSetup(cfg, roofline, tiers=tiers, fast_path=False)
        burst = simulate(speed.make_requests(2000, None, 1), ClusterSpec([fast_setup]), seed=0)
        rate = speed.LOAD * 2000 / burst.summary()["simulated_s"]
        requests = speed.make_requests(opts.requests, rate, 4)
        fast = speed.timed(requests, ClusterSpec([fast_setup]))
        explicit = speed.timed(requests, ClusterSpec([explicit_setup]))
        results = [
            [asdict(r) for r in simulate(requests, ClusterSpec([s]), seed=0).requests]
            for s in (fast_setup, explicit_setup)
        ]
        rows.append(
            {
                "model": model,
                "gpu": "H100-SXM",
                "tp": tp,
                "tiers": [t.model_dump() for t in tiers],
                "kv_groups": [
                    {"kind": g.kind, "num_layers": g.num_layers, "window": g.sliding_window_tokens}
                    for g in cfg.kv_groups
                ],
                "num_gpu_blocks": cfg.num_gpu_blocks,
                "block_size": cfg.block_size,
                "rate_requests_per_s": round(rate, 2),
                "fast": fast,
                "explicit": explicit,
                "speedup_cpu": round(explicit["cpu_s"] / fast["cpu_s"], 2),
                "identical_results": results[0] == results[1],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    out["runs"] = rows
    if opts.out:
        opts.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
