"""Trace replay at scale: peak RSS of a whole ``kvbudget sim`` process replaying a JSONL trace.

A Mooncake-style trace (``timestamp`` in ms, ``hash_ids`` of 512-token blocks, no token ids) is
written for each size: 1,024 input tokens (two hash ids drawn from 50,000, so prefixes repeat),
64 output tokens, 20 requests per second on average (gaps of 0-99 ms, seeded). Each size runs
``kvbudget sim --scenario`` (Llama-3.1-8B on one H100-SXM, prefix caching on) as a child
process; ``os.wait4`` gives its own CPU seconds and peak RSS (``bench/sim_scale.py``'s
``run_child``). The replay streams an ordered trace (docs/simulator.md), so the peak should not
grow with the number of lines.

Run: ``.venv/bin/python bench/trace_replay.py --sizes 100000,300000 --out
bench/results/trace_replay.json``; ``scripts/render_benchmarks.py`` renders it in
docs/benchmarks.md. Figures are measurements of simulator memory and CPU on the host named in
the file; the simulated latencies inside are roofline estimates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_scale import compile_bytecode, run_child, tree_commit

BLOCK_TOKENS = 512


def write_trace(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    gaps = rng.integers(0, 100, size=n)
    ids = rng.integers(0, 50_000, size=(n, 2))
    t = 0
    with path.open("w", encoding="utf-8") as fh:
        for k in range(n):
            t += int(gaps[k])
            line = {"timestamp": t, "input_length": 2 * BLOCK_TOKENS, "output_length": 64,
                    "hash_ids": [int(ids[k, 0]), int(ids[k, 1])]}  # fmt: skip
            fh.write(json.dumps(line, separators=(",", ":")) + "\n")


def run_size(n: int, tmp: Path) -> dict[str, Any]:
    trace = tmp / f"trace-{n}.jsonl"
    write_trace(trace, n)
    scenario = tmp / f"scenario-{n}.yaml"
    scenario.write_text(
        "model: meta-llama/Llama-3.1-8B\ngpu: H100-SXM\nreplicas: 1\nworkload:\n"
        f"  trace: {{path: {json.dumps(str(trace))}, block_size: {BLOCK_TOKENS}}}\n"
    )
    cmd = [sys.executable, "-m", "kvbudget", "sim", "--scenario", str(scenario), "--json"]
    child = run_child(cmd, timeout_s=3600)
    row: dict[str, Any] = {
        "trace_lines": n,
        "trace_bytes": trace.stat().st_size,
        "ran": child["rc"] == 0,
        "cpu_s": round(child["cpu_s"], 2),
        "wall_s": round(child["wall_s"], 2),
        "peak_rss_bytes": child["peak_rss_bytes"],
    }
    if child["rc"] != 0:
        row["error"] = child["stderr"][-2000:]
        return row
    summary = json.loads(child["stdout"])
    row["requests_completed"] = summary.get("requests_completed")
    row["simulator_build"] = summary.get("simulator_build")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,300000")
    ap.add_argument("--out", type=Path)
    opts = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    commit = tree_commit(root)
    out: dict[str, Any] = {
        "what": "whole-process peak RSS and CPU of a trace replay (measured host memory and "
        "CPU); simulated latencies are roofline estimates",
        "workload": {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM",
                     "trace": "Mooncake-style: 2 hash ids of 512 tokens from 50,000, 64 out, "
                     "gaps 0-99 ms"},
        "host": {"python": sys.version.split()[0], "machine": platform.machine(),
                 "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "commit": commit,
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "bytecode": compile_bytecode(root / "src"),
        "runs": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kvbudget-trace-") as tmp:
        for n in sorted(int(x) for x in opts.sizes.split(",")):
            row = run_size(n, Path(tmp))
            out["runs"].append(row)
            print(json.dumps(row), flush=True)
    if opts.out:
        opts.out.write_text(json.dumps(out, indent=2) + "\n")
    failed = [r["trace_lines"] for r in out["runs"] if not r["ran"]]
    if failed:
        raise SystemExit(f"trace replay failed at {failed} lines (see 'error' in each run)")


if __name__ == "__main__":
    main()
