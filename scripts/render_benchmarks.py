"""Render the tables of docs/benchmarks.md and docs/calibration.md from bench/results/.

Every published figure table sits between ``<!-- generated:NAME:begin -->`` and
``<!-- generated:NAME:end -->`` and is rewritten from its raw JSON file by this script (and the
llama.cpp block by ``bench/llamacpp_measure.render_markdown``), so no table is typed by hand.
``tests/unit/test_published_figures.py`` fails when a block differs from what the raw file gives.

    python scripts/render_benchmarks.py           # rewrite the blocks in both documents
    python scripts/render_benchmarks.py --check   # exit 1 if a block is out of date
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs" / "benchmarks.md"
CALIBRATION_DOC = ROOT / "docs" / "calibration.md"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    return data


def _dash(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def client_overhead(name: str) -> str:
    """The load-client overhead table of one run (``bench/client_overhead.py``'s raw rows)."""
    rows = _load(name)["rows"]
    out = [
        "| client | streams | requests | req/s | events/s | max in flight | client CPU ms/req "
        "(load window) | client process CPU ms/req (incl. start-up) | TTFT bias p50 ms | "
        "TTFT bias p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['client']} | {r['concurrency']} | {r['requests_completed']} | "
            f"{r['requests_per_s']:,.0f} | {r['events_per_s']:,.0f} | {r['max_inflight']} | "
            f"{_dash(r.get('client_cpu_ms_per_request_run'), '.2f')} | "
            f"{_dash(r.get('client_process_cpu_ms_per_request'), '.2f')} | "
            f"{_dash(r.get('ttft_bias_ms_p50'), '.2f')} | {_dash(r.get('ttft_bias_ms_p99'), '.1f')} |"
        )
    return "\n".join(out)


def sim_speed() -> str:
    """Requests per CPU-second and per wall-second of ``bench/sim_speed.py``'s raw runs."""
    data = _load("sim_speed.json")
    out = [
        "| prefix caching | hash | replicas | router | requests | req/CPU-s best | req/CPU-s "
        "median | req/wall-s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        caching = r["prefix_caching"]
        out.append(
            f"| {'on' if caching else 'off'} | {r.get('hash_algo', 'builtin') if caching else '–'} "
            f"| {r['replicas']} | {r.get('router', '–')} | {r['requests']:,} | "
            f"{r['requests_per_cpu_s']:,} | {r['requests_per_cpu_s_median']:,} | "
            f"{r['requests_per_wall_s']:,} |"
        )
    fast = data["fast_path_vs_explicit"]
    out.append("")
    out.append(
        f"Lazy-decode fast path vs stepping `EngineCore` every step, {fast['requests']:,} "
        f"requests: {fast['fast_cpu_s']:.3f} vs {fast['explicit_cpu_s']:.3f} CPU s "
        f"(**{fast['speedup']:.1f}×**)."
    )
    v = data["vidur"]
    k = v["kvbudget_same_run"]
    out.append("")
    out.append(
        "| peer, same run | requests | req / CPU-s | req / wall-s |\n|---|---|---|---|\n"
        f"| Vidur | {v['run']['requests']:,} | {v['requests_per_cpu_s']:,} | "
        f"{v['requests_per_wall_s']:,} |\n"
        f"| kvbudget | {k['requests']:,} | {k['requests_per_cpu_s']:,} | "
        f"{k['requests_per_wall_s']:,} |"
    )
    return "\n".join(out)


def llamacpp() -> str:
    spec = importlib.util.spec_from_file_location(
        "llamacpp_measure", ROOT / "bench" / "llamacpp_measure.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.render_markdown(_load("llamacpp.json"))
    return text.rstrip("\n") + "\n"  # as --update-docs writes it


def sim_scale(name: str) -> str:
    """Whole-process simulator speed and peak RSS beside Vidur (``bench/sim_scale.py``)."""
    data = _load(name)
    w, host = data["workload"], data["host"]
    out = [
        f"Measured by `bench/sim_scale.py` on {data.get('started_utc', '?')} UTC, commit "
        f"`{data.get('commit') or '?'}`, on this shared host ({host['cpus']} vCPUs, "
        f"{host['machine']}, Python {host['python']}; load average "
        f"{host['loadavg_at_start'][0]:.1f} at the start, {data['loadavg_at_end'][0]:.1f} at the "
        "end). Each row is one whole `kvbudget sim` process on one core: CPU s is that "
        "process's own user + system time (requests / CPU s is the figure to read on a shared "
        "host), wall s its elapsed time. Workload (simulated, roofline timing model): "
        f"{w['model']} on one {w['gpu']}, {w['input_tokens']:,} in / {w['output_tokens']:,} out, "
        f"{w['arrivals']}. Raw result: [`bench/results/{name}`](../bench/results/{name}).",
        "",
        "| requests | records written | CPU s | wall s | requests / CPU s | requests / wall s | "
        "peak RSS (MB) | simulated s | TTFT p50 ms (simulated) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["runs"]:
        if not r.get("ran"):
            out.append(f"| {r['requests']:,} | did not run: {r.get('reason', '?')} |||||||")
            continue
        rec = f"yes ({r['records_bytes'] / 1e6:,.0f} MB)" if r.get("records_out") else "no"
        out.append(
            f"| {r['requests']:,} | {rec} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
            f"{r['requests_per_cpu_s']:,} | {r['requests_per_wall_s']:,} | "
            f"{r['peak_rss_bytes'] / 1e6:,.0f} | {r['simulated_s']:,.0f} | "
            f"{r['ttft_p50_s'] * 1e3:.1f} |"
        )
    v = data.get("vidur", {})
    out.append("")
    if "requests_per_cpu_s" in v:
        run, start = v["run"], v["startup"]
        trained = (
            f"; its predictors were trained in this run ({v['training_wall_s']:,.0f} s wall)"
            if "training_wall_s" in v
            else "; its predictors came from the cache (trained in an earlier run)"
        )
        out.append(
            f"Vidur 0.0.26 in the same run (its own processes, measured the same way): "
            f"{run['requests']:,} requests at Poisson {v['qps']:g} req/s on its A100 Llama-3-8B "
            f"profile, {run['cpu_s']:.1f} CPU s / {run['wall_s']:.1f} wall s, peak RSS "
            f"{run['peak_rss_bytes'] / 1e6:,.0f} MB; less its start-up (10 requests: "
            f"{start['cpu_s']:.1f} CPU s / {start['wall_s']:.1f} wall s): "
            f"{v['requests_per_cpu_s']:,} requests / CPU s, {v['requests_per_wall_s']:,} / wall s"
            f"{trained}. kvbudget over Vidur at {run['requests']:,} requests: "
            f"**{v['ratio_kvbudget_over_vidur_cpu']}x** per CPU second "
            f"({v['ratio_kvbudget_over_vidur_wall']}x per wall second; kvbudget's figure "
            "includes its own start-up)."
        )
    else:
        reason = v.get("run", v.get("startup", {})).get("reason", "see the raw file")
        out.append(f"Vidur did not run in this file: {reason}.")
    return "\n".join(out)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0%}"


def vllm_calibrate() -> str:
    """Predicted vs measured p50s of ``bench/vllm_calibrate.py``'s raw validation report."""
    raw = _load("vllm_calibrate.json")
    rep = raw["report"]
    errors = {(e["cell_id"], e["metric"]): e["rel_error"] for e in rep["errors"]}
    out = [
        f"{raw['label']}. Engine: {rep['engine']} on {rep['hardware']}; run "
        f"{raw['date_utc']}, load average {raw['load_average_1m_before']} before and "
        f"{raw['load_average_1m_after']} after on {raw['cpu_count']} cores; timings from "
        f"`{rep['profile']['engine_settings']['timings_source']}`. Command: "
        f"`{raw['command']}`.",
        "",
        "| cell | role | prompt tokens | concurrency | requests | TTFT p50 measured (ms) | "
        "predicted (ms) | error | TPOT p50 measured (ms) | predicted (ms) | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in rep["cells"]:
        m, p = c["measured"], c["predicted"]
        out.append(
            f"| {c['cell_id']} | {c['role']} | {c['prompt_tokens']:,} | {c['concurrency']} | "
            f"{c['num_requests']} | {m['ttft_p50_s'] * 1e3:,.0f} | {p['ttft_p50_s'] * 1e3:,.0f} | "
            f"{_pct(errors.get((c['cell_id'], 'ttft_p50_s')))} | {m['tpot_p50_s'] * 1e3:,.1f} | "
            f"{p['tpot_p50_s'] * 1e3:,.1f} | {_pct(errors.get((c['cell_id'], 'tpot_p50_s')))} |"
        )
    worst = rep["held_out_max_abs_rel_error"]
    held = [
        abs(e["rel_error"])
        for e in rep["errors"]
        if e["role"] == "held-out"
        and e["metric"] in ("ttft_p50_s", "tpot_p50_s")
        and e["rel_error"] is not None
    ]
    median = sorted(held)[len(held) // 2] if held else None
    out.append("")
    out.append(
        f"Held-out cells, largest |error|: TTFT p50 {worst['ttft_p50_s']:.0%}, TPOT p50 "
        f"{worst['tpot_p50_s']:.0%}; median |error| of the held-out p50s "
        f"{'—' if median is None else f'{median:.0%}'} (target ±"
        f"{rep['target_rel_error']:.0%}: **{'met' if rep['target_met'] else 'not met'}**). "
        f"Calibration {rep['calibration_wall_s']:.0f} s, whole run {rep['validation_wall_s']:.0f} s."
    )
    return "\n".join(out)


BLOCKS: dict[str, Callable[[], str]] = {
    "sim-scale": lambda: sim_scale("sim_scale.json"),
    "sim-scale-earlier": lambda: sim_scale("sim_scale_earlier_run.json"),
    "client-overhead": lambda: client_overhead("client_overhead.json"),
    "client-overhead-earlier": lambda: client_overhead("client_overhead_earlier_run.json"),
    "sim-speed": sim_speed,
    "llamacpp": llamacpp,
}
#: the generated blocks of docs/calibration.md
CALIBRATION_BLOCKS: dict[str, Callable[[], str]] = {"vllm-calibrate": vllm_calibrate}


def _pattern(name: str) -> re.Pattern[str]:
    # the llama.cpp block keeps the markers bench/llamacpp_measure.py --update-docs writes
    tag = "llamacpp" if name == "llamacpp" else f"generated:{name}"
    return re.compile(
        rf"(<!-- {re.escape(tag)}:begin -->\n)(.*?)(\n<!-- {re.escape(tag)}:end -->)", re.DOTALL
    )


def published(text: str, blocks: dict[str, Callable[[], str]] | None = None) -> dict[str, str]:
    """The generated blocks as they stand in a document."""
    out: dict[str, str] = {}
    for name in BLOCKS if blocks is None else blocks:
        match = _pattern(name).search(text)
        if match:
            out[name] = match.group(2)
    return out


def render(text: str, blocks: dict[str, Callable[[], str]] | None = None) -> str:
    """``text`` with every generated block rewritten from its raw file."""
    for name, make in (BLOCKS if blocks is None else blocks).items():
        body = make()
        text, n = _pattern(name).subn(lambda m, b=body: m.group(1) + b + m.group(3), text)
        if n != 1:
            raise SystemExit(f"no (or more than one) block generated:{name} in the document")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a block is out of date")
    args = ap.parse_args(argv)
    stale = 0
    for doc, blocks in ((DOCS, BLOCKS), (CALIBRATION_DOC, CALIBRATION_BLOCKS)):
        text = doc.read_text(encoding="utf-8")
        new = render(text, blocks)
        if args.check:
            if new != text:
                print(
                    f"{doc}: generated blocks are out of date; run {sys.argv[0]}", file=sys.stderr
                )
                stale = 1
        else:
            doc.write_text(new, encoding="utf-8")
    return stale


if __name__ == "__main__":
    raise SystemExit(main())
