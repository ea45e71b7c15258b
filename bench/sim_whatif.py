"""What each mechanism buys, on one workload (every figure *simulated*, roofline timing).

The seeds ask what prefix caching, KV quantization, offload and routing each solve. This runs
one shared-document workload through the simulator under several configurations and prints a
Markdown table (TTFT/TPOT percentiles, prefix hit rate, preemptions, throughput). Nothing here
is measured on an engine.

Run: ``.venv/bin/python bench/sim_whatif.py [--requests 1500] [--rate 6] [--out table.md]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from kvbudget.sim.cluster import simulate
from kvbudget.sim.scenario import build_cluster, build_workload, scenario_from_dict

CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("no prefix caching, round robin", {"prefix_caching": False}),
    ("prefix caching, round robin", {}),
    ("prefix caching, fp8 KV cache", {"kv_dtype": "fp8"}),
    ("prefix caching, prefix-precise router", {"router": "prefix_precise"}),
    ("prefix caching, cost router", {"router": "cost"}),
    (
        "prefix caching, cost router, 64 GiB CPU tier at 25 GB/s",
        {
            "router": "cost",
            "tiers": [
                {
                    "name": "cpu",
                    "capacity_bytes": 64 * 2**30,
                    "bandwidth_bytes_per_s": 25e9,
                    "latency_s": 0.0002,
                }
            ],
        },
    ),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--rate", type=float, default=6.0, help="requests/s over the cluster")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--out", type=Path)
    opts = ap.parse_args()
    base: dict[str, Any] = {
        "model": "meta-llama/Llama-3.1-8B",
        "gpu": "L40S",
        "replicas": opts.replicas,
        "sample_every_s": 5.0,
        "workload": {
            "num_requests": opts.requests,
            "arrivals": {"kind": "poisson", "rate_per_s": opts.rate},
            "input_tokens": {"kind": "fixed", "value": 8192},
            "output_tokens": {"kind": "fixed", "value": 256},
            "prefix": {"num_groups": 32, "group_prefix_tokens": 6144, "zipf_s": 1.1},
        },
    }
    lines = [
        f"Workload: {opts.requests} requests, Poisson {opts.rate}/s, 8,192 input tokens "
        "(6,144 from one of 32 shared documents, Zipf 1.1), 256 output tokens; "
        f"{opts.replicas} x Llama-3.1-8B on L40S (pool from make_plan). Figures: simulated, "
        "timing model roofline.",
        "",
        "| configuration | TTFT p50 s | TTFT p99 s | TPOT p50 ms | TPOT p99 ms | hit rate "
        "(tokens) | preemptions | KV usage peak | output tok/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, change in CONFIGS:
        scenario = scenario_from_dict({**base, **change})
        cluster = build_cluster(scenario)
        requests, concurrency = build_workload(scenario)
        cluster.concurrency = concurrency
        t0 = time.perf_counter()
        s = simulate(requests, cluster, seed=scenario.seed).summary()
        print(f"{label}: {time.perf_counter() - t0:.1f} s wall", flush=True)
        lines.append(
            f"| {label} | {s['ttft_p50_s']:.3f} | {s['ttft_p99_s']:.3f} | "
            f"{s['tpot_p50_s'] * 1e3:.1f} | {s['tpot_p99_s'] * 1e3:.1f} | "
            f"{s['prefix_hit_rate_tokens'] * 100:.1f}% | {s['num_preemptions']} | "
            f"{(s['kv_usage_peak'] or 0) * 100:.0f}% | {s['output_tokens_per_s']:.0f} |"
        )
    table = "\n".join(lines)
    print(table)
    if opts.out:
        opts.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
