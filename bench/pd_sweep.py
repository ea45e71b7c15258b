"""Where P/D disaggregation wins and where it loses (every figure *simulated*, roofline timing).

Same GPUs both ways: 1 prefill + 1 decode replica against 2 co-located replicas, Llama-3.1-8B on
H100-SXM, TP 1, round robin, Poisson arrivals, over prompt length x arrival rate x KV-link
bandwidth (kvbudget.sim.disagg). Writes the raw rows to ``bench/results/pd_sweep.json`` and,
with ``--docs``, regenerates the table in ``docs/disaggregation.md`` between its markers (a
test checks that the table there is exactly this script's rendering of the stored rows).

Run: ``.venv/bin/python bench/pd_sweep.py [--requests 300] [--docs]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from kvbudget.sim.disagg import KVLinkConfig, PDSpec, compare_pd
from kvbudget.sim.scenario import build_cluster, build_workload, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "pd_sweep.json"
DOC = ROOT / "docs" / "disaggregation.md"
BEGIN, END = "<!-- pd-sweep:begin -->", "<!-- pd-sweep:end -->"

PROMPTS = (256, 4096)
RATES = (1.0, 8.0)
LINKS: tuple[tuple[str, float], ...] = (("400 Gb/s RDMA", 50e9), ("10 GbE", 1.25e9))
OUTPUT_TOKENS = 256


def run(num_requests: int, seed: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for prompt in PROMPTS:
        for rate in RATES:
            scenario = scenario_from_dict(
                {
                    "model": "meta-llama/Llama-3.1-8B",
                    "gpu": "H100-SXM",
                    "replicas": 2,
                    "seed": seed,
                    "sample_every_s": None,
                    "workload": {
                        "num_requests": num_requests,
                        "arrivals": {"kind": "poisson", "rate_per_s": rate},
                        "input_tokens": {"kind": "fixed", "value": prompt},
                        "output_tokens": {"kind": "fixed", "value": OUTPUT_TOKENS},
                    },
                },
                origin="pd_sweep",
            )
            cluster = build_cluster(scenario)
            requests, _ = build_workload(scenario)
            one = cluster.setups[0]
            for link_name, bandwidth in LINKS:
                link = KVLinkConfig(
                    bandwidth_bytes_per_s=bandwidth, latency_s=20e-6, per_transfer_s=50e-6
                )
                spec = PDSpec([one], [one], link)
                table = compare_pd(requests, spec, cluster.setups, seed=seed)
                rows.append(
                    {
                        "prompt_tokens": prompt,
                        "output_tokens": OUTPUT_TOKENS,
                        "rate_per_s": rate,
                        "link": link_name,
                        "link_bandwidth_bytes_per_s": bandwidth,
                        **table,
                    }
                )
    return rows


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.1f}"


def render(doc: dict[str, Any]) -> str:
    """The Markdown table of a stored result document."""
    lines = [
        f"Simulated ({doc['rows'][0]['timing_model']} timing), {doc['setup']}; "
        f"{doc['num_requests']} requests per point, seed {doc['seed']}. "
        "TTFT and TPOT in ms (p50 / p99). Winner: lower TTFT p99 and TPOT p99 both; "
        "`mixed` when each side wins one.",
        "",
        "| prompt | rate (req/s) | link | P/D TTFT | co-located TTFT | P/D TPOT | co-located TPOT | transfer (mean) | winner |",
        "|---:|---:|---|---|---|---|---|---:|---|",
    ]
    for row in doc["rows"]:
        pd, co = row["disaggregated"], row["colocated"]
        ttft_pd, ttft_co = pd["ttft_p99_s"], co["ttft_p99_s"]
        tpot_pd, tpot_co = pd["tpot_p99_s"], co["tpot_p99_s"]
        wins = (ttft_pd < ttft_co, tpot_pd < tpot_co)
        winner = "P/D" if all(wins) else "co-located" if not any(wins) else "mixed"
        lines.append(
            f"| {row['prompt_tokens']} | {row['rate_per_s']:g} | {row['link']} | "
            f"{_ms(pd['ttft_p50_s'])} / {_ms(ttft_pd)} | {_ms(co['ttft_p50_s'])} / {_ms(ttft_co)} | "
            f"{_ms(pd['tpot_p50_s'])} / {_ms(tpot_pd)} | {_ms(co['tpot_p50_s'])} / {_ms(tpot_co)} | "
            f"{_ms(pd['transfer_s_mean'])} | {winner} |"
        )
    return "\n".join(lines)


def write_docs(doc: dict[str, Any]) -> None:
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{render(doc)}\n{END}{tail}", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs", action="store_true", help="regenerate docs/disaggregation.md's table")
    opts = ap.parse_args()
    wall0 = time.perf_counter()
    rows = run(opts.requests, opts.seed)
    doc = {
        "schema": "kvbudget.bench.pd_sweep/1",
        "figures": "simulated",
        "setup": "Llama-3.1-8B, H100-SXM, TP 1; 1 prefill + 1 decode vs 2 co-located, round robin",
        "num_requests": opts.requests,
        "seed": opts.seed,
        "host_machine": platform.machine(),
        "wall_s": round(time.perf_counter() - wall0, 2),
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(render(doc))
    if opts.docs:
        write_docs(doc)


if __name__ == "__main__":
    main()
