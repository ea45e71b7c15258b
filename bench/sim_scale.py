"""Trace scale: the whole ``kvbudget sim`` process at growing request counts, beside Vidur.

Workload of issue 18: Llama-3.1-8B on one H100-SXM (pool from ``make_plan``), 1,024 input and
128 output tokens, Poisson 20 req/s, prefix caching on. Each size runs ``kvbudget sim --json``
in a child process and records its peak RSS (``ru_maxrss`` of the child), CPU seconds (user +
system of the child) and wall seconds. Vidur 0.0.26 (its own venv; offline profile cache from
``/work/shared/peers/vidur-offline``, see ``bench/sim_speed.py``) runs the same shape in the
same run: its start-up (N=10) is subtracted from its run, as that README says.

Run: ``.venv/bin/python bench/sim_scale.py --sizes 20000,100000 --vidur-requests 10000
--out bench/results/sim_scale.json``; ``bench/sim_scale_table.py`` renders the table. Figures
are measurements of simulator speed and memory on the machine named in the file; the simulated
latencies inside are roofline estimates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_speed import run_vidur

RATE = 20.0


def run_kvbudget(n: int) -> dict[str, Any]:
    """One whole ``kvbudget sim`` process; its own measures."""
    cmd = [
        sys.executable, "-m", "kvbudget", "sim", "--model", "meta-llama/Llama-3.1-8B",
        "--gpu", "H100-SXM", "--input-tokens", "1024", "--output-tokens", "128",
        "--rate", f"{RATE:g}", "--requests", str(n), "--json",
    ]  # fmt: skip
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        return {"ran": False, "requests": n, "reason": proc.stderr.strip()[-300:]}
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    summary = json.loads(proc.stdout)
    return {
        "ran": True,
        "requests": n,
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        # ru_maxrss of children is the largest child so far: sizes run in increasing order
        "peak_rss_bytes": r1.ru_maxrss * 1024,
        "requests_per_cpu_s": round(n / cpu),
        "requests_per_wall_s": round(n / wall),
        "requests_completed": summary["requests_completed"],
        "simulated_s": round(summary["simulated_s"], 2),
        "ttft_p50_s": summary["ttft_p50_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,100000")
    ap.add_argument("--vidur-python", default="/tmp/vidur-venv/bin/python")
    ap.add_argument("--vidur-requests", type=int, default=10_000)
    ap.add_argument("--out", type=Path)
    opts = ap.parse_args()
    out: dict[str, Any] = {
        "what": "whole-process simulator speed and peak RSS (measured host time and memory); "
        "simulated latencies are roofline estimates",
        "workload": {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM", "input_tokens": 1024,
                     "output_tokens": 128, "arrivals": f"poisson {RATE:g} req/s"},
        "host": {"python": sys.version.split()[0], "machine": platform.machine(),
                 "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "runs": [],
    }  # fmt: skip
    for n in sorted(int(x) for x in opts.sizes.split(",")):
        row = run_kvbudget(n)
        out["runs"].append(row)
        print(json.dumps(row), flush=True)
    vn = opts.vidur_requests
    startup = run_vidur(opts.vidur_python, 10, 8.0)
    vidur: dict[str, Any] = {"startup": startup}
    if startup.get("ran"):
        main_run = run_vidur(opts.vidur_python, vn, 8.0)
        vidur["run"] = main_run
        if main_run.get("ran"):
            vidur["requests_per_cpu_s"] = round(
                vn / max(1e-9, main_run["cpu_s"] - startup["cpu_s"])
            )
            vidur["requests_per_wall_s"] = round(
                vn / max(1e-9, main_run["wall_s"] - startup["wall_s"])
            )
            ours = run_kvbudget(vn)
            vidur["kvbudget_same_size"] = ours
            if ours.get("ran"):
                vidur["ratio_kvbudget_over_vidur_cpu"] = round(
                    ours["requests_per_cpu_s"] / vidur["requests_per_cpu_s"], 2
                )
    out["vidur"] = vidur
    out["loadavg_at_end"] = os.getloadavg()
    print(json.dumps(vidur), flush=True)
    if opts.out:
        opts.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
