"""Render ``bench/results/sim_scale.json`` (``bench/sim_scale.py``) as a Markdown table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results" / "sim_scale.json"


def table(data: dict) -> str:
    w = data["workload"]
    lines = [
        f"Measured: whole `kvbudget sim` process, {w['model']} on {w['gpu']} (simulated, "
        f"roofline), {w['input_tokens']}/{w['output_tokens']} tokens, {w['arrivals']}; host "
        f"{data['host']['machine']}, {data['host']['cpus']} CPUs, load average at start "
        f"{data['host']['loadavg_at_start'][0]:.1f}.",
        "",
        "| requests | CPU s | wall s | requests / CPU s | peak RSS (MB) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in data["runs"]:
        if r.get("ran"):
            lines.append(
                f"| {r['requests']:,} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
                f"{r['requests_per_cpu_s']:,} | {r['peak_rss_bytes'] / 1e6:,.0f} |"
            )
    v = data.get("vidur", {})
    if "requests_per_cpu_s" in v:
        ours = v["kvbudget_same_size"]
        lines += [
            "",
            f"Vidur 0.0.26, same shape, {v['run']['requests']:,} requests (start-up subtracted): "
            f"{v['requests_per_cpu_s']:,} requests / CPU s; kvbudget at the same size "
            f"{ours['requests_per_cpu_s']:,}: ratio {v['ratio_kvbudget_over_vidur_cpu']}x.",
        ]
    elif v:
        lines += ["", f"Vidur did not run: {v.get('startup', {}).get('reason', 'see file')}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    sys.stdout.write(table(json.loads(path.read_text())))
