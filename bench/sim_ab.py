"""Before / after on a loaded host: two source trees' whole ``kvbudget sim`` processes at once.

On a shared host the CPU time of one process moves with the others' load (caches, sibling
threads), so runs made at different times do not compare. This runs the issue-18 workload
(``bench/sim_scale.py``'s) with ``PYTHONPATH`` set to each tree's ``src``, both trees **at the
same time**, for a few rounds, and reports each one's requests per CPU second (its own CPU, from
``os.wait4``) and the ratio per round. Results must be identical: the summaries' simulated
figures are compared.

Both trees' bytecode caches are written before the rounds (``python -m compileall``, as
``bench/sim_scale.py`` does), and the raw file says so (``bytecode``).

Run: ``git archive OLD src | tar -x -C /tmp/old && .venv/bin/python bench/sim_ab.py --before
/tmp/old/src --after src --requests 50000 --out bench/results/sim_ab.json``.

Pure Python against the mypyc build of one tree (``bench/results/sim_mypyc_ab.json``):
``--before src --before-env KVBUDGET_PURE_PYTHON=1 --after src``. Each side records the
``simulator_build`` its ``kvbudget sim --json`` named.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_scale import RATE, compile_bytecode, run_child

SAME_KEYS = ("requests_completed", "simulated_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s")


def one(src: str, n: int, extra_env: dict[str, str]) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "kvbudget", "sim", "--model", "meta-llama/Llama-3.1-8B",
        "--gpu", "H100-SXM", "--input-tokens", "1024", "--output-tokens", "128",
        "--rate", f"{RATE:g}", "--requests", str(n), "--json",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()), **extra_env)
    r = run_child(cmd, env=env, timeout_s=3600)
    if r["rc"] != 0:
        return {"ran": False, "reason": r["stderr"].strip()[-300:]}
    summary = json.loads(r["stdout"])
    return {
        "ran": True,
        "cpu_s": round(r["cpu_s"], 2),
        "wall_s": round(r["wall_s"], 2),
        "peak_rss_bytes": r["peak_rss_bytes"],
        "requests_per_cpu_s": round(n / r["cpu_s"]),
        "summary": {k: summary[k] for k in SAME_KEYS},
        "simulator_build": summary.get("simulator_build", "pure Python (not named by this tree)"),
        "timing_model": summary.get("timing_model", "roofline"),
    }


def _env(pairs: list[str]) -> dict[str, str]:
    return dict(p.split("=", 1) for p in pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the old tree's src directory")
    ap.add_argument("--after", required=True, help="the new tree's src directory")
    ap.add_argument("--before-label", default="before")
    ap.add_argument("--after-label", default="after")
    ap.add_argument("--before-env", action="append", default=[], help="KEY=VALUE (repeatable)")
    ap.add_argument("--after-env", action="append", default=[], help="KEY=VALUE (repeatable)")
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    opts = ap.parse_args()
    out: dict[str, Any] = {
        "what": "whole-process kvbudget sim, two source trees run at the same time (measured "
        "host CPU); simulated latencies are estimates of the timing model each side names",
        "labels": {"before": opts.before_label, "after": opts.after_label},
        "env": {"before": opts.before_env, "after": opts.after_env},
        "requests": opts.requests,
        "host": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "rounds": [],
    }
    # both trees' bytecode caches written first, as bench/sim_scale.py does (an installed
    # wheel has them; without them each process compiles every interpreted module it imports)
    out["bytecode"] = {
        side: compile_bytecode(Path(src))
        for side, src in (("before", opts.before), ("after", opts.after))
    }
    for _ in range(opts.rounds):
        res: dict[str, dict[str, Any]] = {}
        threads = [
            threading.Thread(
                target=lambda k=k, s=s, e=e, res=res: res.update({k: one(s, opts.requests, e)})
            )
            for k, s, e in (
                ("before", opts.before, _env(opts.before_env)),
                ("after", opts.after, _env(opts.after_env)),
            )
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        row: dict[str, Any] = dict(res)
        if res["before"].get("ran") and res["after"].get("ran"):
            row["same_results"] = res["before"]["summary"] == res["after"]["summary"]
            row["speedup_cpu"] = round(
                res["after"]["requests_per_cpu_s"] / res["before"]["requests_per_cpu_s"], 2
            )
        out["rounds"].append(row)
        print(json.dumps(row), flush=True)
    out["loadavg_at_end"] = os.getloadavg()
    if opts.out:
        opts.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
