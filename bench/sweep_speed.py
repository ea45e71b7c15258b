"""Sweep throughput on Ray: points per second with two local workers against one.

The same 8-point grid (Llama-3.1-8B, H100-SXM / A100-80GB x 1 / 2 replicas x 10 / 20 req/s,
``NUM_REQUESTS`` requests of 1,024 + 128 tokens each) is swept by ``kvbudget sweep --workers W
--json`` in a fresh process (a fresh local Ray) for W = 1 and W = 2, alternating, ``--repeats``
times each. Reported per run: the sweep's simulate phase (Ray already up and every worker has
imported the simulator: points submitted -> last row written), Ray's start (with that worker
warm-up), the total wall, and the host CPU seconds the points used
(the sum of their ``wall_s`` as Ray workers saw it). The target ratio is
``points/s (2 workers) / points/s (1 worker) >= 1.6`` on the simulate phase, best run of each.

The figures are measurements of *kvbudget's speed* on this machine (its CPU count and load
average are recorded); the latencies inside the rows are simulated (roofline), not measured.

Run: ``.venv/bin/python bench/sweep_speed.py [--repeats 2] [--out bench/results/sweep_speed.json]``;
``--from-json FILE`` only re-renders the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- sweep_speed:begin -->", "<!-- sweep_speed:end -->"
NUM_REQUESTS = 8000
TARGET_RATIO = 1.6

GRID: dict[str, Any] = {
    "base": {
        "model": "meta-llama/Llama-3.1-8B",
        "max_model_len": 8192,
        "workload": {
            "num_requests": NUM_REQUESTS,
            "input_tokens": {"kind": "fixed", "value": 1024},
            "output_tokens": {"kind": "fixed", "value": 128},
        },
    },
    "grid": {"gpu": ["H100-SXM", "A100-80GB"], "replicas": [1, 2], "rate_per_s": [10.0, 20.0]},
    "slos": [{"name": "chat", "ttft_s": {"p99": 0.5}, "tpot_s": {"p99": 0.05}}],
}


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_once(workers: int, work: Path) -> dict[str, Any]:
    grid = work / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    out = work / f"out-{workers}-{time.time_ns()}"
    load_before = _loadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "kvbudget", "sweep", str(grid), "--out", str(out)),
            *("--workers", str(workers), "--json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"kvbudget sweep failed: {proc.stderr.strip()[-500:]}")
    result = json.loads(proc.stdout)
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return {
        "workers": workers,
        "num_points": result["num_points"],
        "simulate_s": result["simulate_s"],
        "ray_start_s": result["ray_start_s"],
        "process_wall_s": total,
        "points_per_s": result["num_points"] / result["simulate_s"],
        "point_wall_s_sum": sum(r["wall_s"] for r in rows),
        "point_cpu_s_sum": sum(r["cpu_s"] for r in rows),
        # CPU the points got while the simulate phase ran: what the machine gave the workers
        "cores_obtained": sum(r["cpu_s"] for r in rows) / result["simulate_s"],
        "worker_pids": sorted({r["worker_pid"] for r in rows}),
        "statuses": sorted({r["status"] for r in rows}),
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
    }


def render(result: dict[str, Any]) -> str:
    runs = result["runs"]
    best = {
        w: max((r for r in runs if r["workers"] == w), key=lambda r: r["points_per_s"])
        for w in (1, 2)
    }
    ratio = best[2]["points_per_s"] / best[1]["points_per_s"]
    lines = [
        f"Measured by `bench/sweep_speed.py` on {result['started_utc']} UTC. Host: "
        f"{result['host']['cpu_count']} CPUs, {result['host']['platform']}, Python "
        f"{result['host']['python']}, Ray {result['ray_version']}; load average at the start "
        f"{result['runs'][0]['loadavg_before'][0]:g} (the machine is shared with other work). "
        f"Grid: {result['num_points']} points of `kvbudget sweep` ({result['grid_text']}). "
        "Figures are measured *kvbudget speed*; the latencies inside the rows are simulated "
        "(roofline). Raw result: [`bench/results/sweep_speed.json`](../bench/results/sweep_speed.json).",
        "",
        "| run | workers | simulate phase (s) | points/s | Ray start (s) | process wall (s) | "
        "sum of point wall (s) | sum of point CPU (s) | cores obtained | "
        "load avg before / after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(
            f"| {i} | {r['workers']} | {r['simulate_s']:.1f} | {r['points_per_s']:.3f} | "
            f"{r['ray_start_s']:.1f} | {r['process_wall_s']:.1f} | {r['point_wall_s_sum']:.1f} | "
            f"{r['point_cpu_s_sum']:.1f} | {r['cores_obtained']:.2f} | "
            f"{r['loadavg_before'][0]:g} / {r['loadavg_after'][0]:g} |"
        )
    verdict = "meets" if ratio >= TARGET_RATIO else "does NOT meet"
    cores = best[2]["cores_obtained"] / best[1]["cores_obtained"]
    per_core = ratio / cores
    lines += [
        "",
        f"Best of each: {best[2]['points_per_s']:.3f} points/s with 2 workers against "
        f"{best[1]['points_per_s']:.3f} with 1: **{ratio:.2f}x**, which {verdict} the "
        f"{TARGET_RATIO}x target. The two workers obtained {cores:.2f}x the CPU the one worker "
        f"did (cores obtained = CPU seconds of the points / simulate phase), so per CPU obtained "
        f"the scaling is {per_core:.2f} (1.0 = no loss to Ray); a ratio below "
        f"{TARGET_RATIO}x with cores obtained near 1x means the host had no second core to give.",
    ]
    return "\n".join(lines)


def write_doc(markdown: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    block = f"{BEGIN}\n{markdown}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Sweep throughput on Ray\n\n" + block + "\n"
    DOC.write_text(text, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "sweep_speed.json")
    ap.add_argument("--from-json", type=Path, default=None)
    args = ap.parse_args()
    if args.from_json is not None:
        write_doc(render(json.loads(args.from_json.read_text())))
        return
    import ray

    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kvbudget-sweep-speed-") as tmp:
        for _ in range(args.repeats):
            for workers in (1, 2):
                run = run_once(workers, Path(tmp))
                print(json.dumps(run), flush=True)
                runs.append(run)
    result = {
        "kind": "bench.sweep_speed",
        "figures": "measured (kvbudget speed on this host); row latencies simulated (roofline)",
        "started_utc": started,
        "host": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "ray_version": ray.__version__,
        "num_points": runs[0]["num_points"],
        "grid": GRID,
        "grid_text": "Llama-3.1-8B; H100-SXM, A100-80GB; 1, 2 replicas; 10, 20 req/s; "
        f"{NUM_REQUESTS} requests of 1024 + 128 tokens each",
        "target_ratio": TARGET_RATIO,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    markdown = render(result)
    write_doc(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
