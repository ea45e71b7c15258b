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


def sim_fastpath_hybrid(name: str) -> str:
    """Fast path vs explicit stepping on sliding-window replicas (``bench/sim_fastpath_speed.py``)."""
    data = _load(name)
    w, h = data["workload"], data["host"]
    load = "/".join(f"{x:.1f}" for x in h["loadavg_at_start"])
    out = [
        f"Commit {data['commit']}; {w['requests']:,} requests of {w['input_tokens']:,} input and "
        f"{w['output_tokens']:,} output tokens, Poisson arrivals at {w['load']:.0%} of each "
        "replica's simulated saturation (roofline timing; H100-SXM replicas built by "
        f"`make_plan`). CPU seconds: best of {w['repeats']}, same run. Host: Python "
        f"{h['python']}, {h['cpus']} CPUs, load average at the start {load}.",
        "",
        "| model | TP | KV groups (layers) | KV tiers | blocks | req/s | fast path CPU s "
        "| explicit CPU s | explicit / fast | results identical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        groups: dict[str, list[int]] = {}
        for g in r["kv_groups"]:
            name = g["kind"] if g["window"] is None else f"sliding {g['window']:,}"
            groups.setdefault(name, []).append(g["num_layers"])
        text = ", ".join(f"{len(v)} × {k} ({sum(v)})" for k, v in groups.items())
        tiers = ", ".join(
            f"{t['name']} {t['capacity_bytes'] / 2**30:g} GiB, {t['policy']}"
            for t in r.get("tiers", [])
        )
        out.append(
            f"| {r['model']} | {r['tp']} | {text} | {tiers or '–'} | {r['num_gpu_blocks']:,} | "
            f"{r['rate_requests_per_s']} | {r['fast']['cpu_s']:.3f} | "
            f"{r['explicit']['cpu_s']:.3f} | **{r['speedup_cpu']:.2f}×** | "
            f"{'yes' if r['identical_results'] else 'NO'} |"
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


def _sim_builds(runs: list[dict[str, Any]]) -> str:
    """The simulator build each run states (runs from before the mypyc build were pure)."""
    builds = sorted(
        {
            r.get("simulator_build", "pure Python (run before the mypyc build existed)")
            for r in runs
            if r.get("ran")
        }
    )
    return "; ".join(builds) or "none ran"


def _measured_by(script: str, data: dict[str, Any]) -> str:
    """The opening of a whole-process table's caption: script, date, commit and host."""
    host = data["host"]
    end = data.get("loadavg_at_end")
    load = f"{host['loadavg_at_start'][0]:.1f} at the start" + (
        f", {end[0]:.1f} at the end" if end else ""
    )
    return (
        f"Measured by `bench/{script}` on {data.get('started_utc', '?')} UTC, commit "
        f"`{data.get('commit') or '?'}`, on this shared host ({host['cpus']} vCPUs, "
        f"{host['machine']}, Python {host['python']}; load average {load})."
    )


def sim_scale(name: str) -> str:
    """Whole-process simulator speed and peak RSS beside Vidur (``bench/sim_scale.py``)."""
    data = _load(name)
    w = data["workload"]
    timing = ", ".join(
        sorted({r.get("timing_model", "roofline") for r in data["runs"] if r.get("ran")})
    )
    out = [
        _measured_by("sim_scale.py", data) + " Each row is one whole `kvbudget sim` process "
        "on one core: CPU s is that "
        "process's own user + system time (requests / CPU s is the figure to read on a shared "
        f"host), wall s its elapsed time. Workload (simulated, {timing} timing model): "
        f"{w['model']} on one {w['gpu']}, {w['input_tokens']:,} in / {w['output_tokens']:,} out, "
        f"{w['arrivals']}. Simulator build: {_sim_builds(data['runs'])}. "
        f"Raw result: [`bench/results/{name}`](../bench/results/{name}).",
        "",
    ]
    # files from before both builds ran in one run have no build column
    by_build = any("build" in r for r in data["runs"])
    build_head, build_align = ("build | ", "---|") if by_build else ("", "")
    out += [
        f"| requests | {build_head}records written | CPU s | wall s | requests / CPU s | "
        "requests / wall s | peak RSS (MB) | simulated s | TTFT p50 ms (simulated) |",
        f"|---:|{build_align}---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["runs"]:
        build = f"{r.get('build', '?')} | " if by_build else ""
        if not r.get("ran"):
            out.append(f"| {r['requests']:,} | {build}did not run: {r.get('reason', '?')} |||||||")
            continue
        rec = f"yes ({r['records_bytes'] / 1e6:,.0f} MB)" if r.get("records_out") else "no"
        out.append(
            f"| {r['requests']:,} | {build}{rec} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
            f"{r['requests_per_cpu_s']:,} | {r['requests_per_wall_s']:,} | "
            f"{r['peak_rss_bytes'] / 1e6:,.0f} | {r['simulated_s']:,.0f} | "
            f"{r['ttft_p50_s'] * 1e3:.1f} |"
        )
    flat = data.get("rss_flatness")
    if flat:
        out.append("")
        of_build = f" ({data['builds'][0]} build)" if by_build else ""
        out.append(
            f"Memory flatness{of_build}: peak RSS grows "
            f"{flat['peak_rss_growth_bytes_per_request']:,} bytes "
            f"per request from {flat['from_requests']:,} to {flat['to_requests']:,} requests "
            "(0 is flat)."
        )
    speedups = data.get("compiled_over_pure")
    if speedups:
        out.append("")
        out.append(
            "Compiled (mypyc) over pure Python in this run, requests per CPU second: "
            + ", ".join(f"**{s['cpu']}x** at {s['requests']:,}" for s in speedups)
            + " (per wall second: "
            + ", ".join(f"{s['wall']}x" for s in speedups)
            + ")."
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
        schedule = data.get(
            "vidur_schedule", "alongside kvbudget's runs (a thread; its own processes)"
        )
        out.append(
            f"Vidur 0.0.26 in the same run ({schedule}; measured the same way): "
            f"{run['requests']:,} requests at Poisson {v['qps']:g} req/s on its A100 Llama-3-8B "
            f"profile, {run['cpu_s']:.1f} CPU s / {run['wall_s']:.1f} wall s, peak RSS "
            f"{run['peak_rss_bytes'] / 1e6:,.0f} MB; less its start-up (10 requests: "
            f"{start['cpu_s']:.1f} CPU s / {start['wall_s']:.1f} wall s): "
            f"{v['requests_per_cpu_s']:,} requests / CPU s, {v['requests_per_wall_s']:,} / wall s"
            f"{trained}. kvbudget over Vidur at {run['requests']:,} requests: " + _vidur_ratios(v)
        )
    else:
        reason = v.get("run", v.get("startup", {})).get("reason", "see the raw file")
        out.append(f"Vidur did not run in this file: {reason}.")
    return "\n".join(out)


def _vidur_ratios(v: dict[str, Any]) -> str:
    """kvbudget over Vidur: one ratio (older files), or one per simulator build."""
    by_build = v.get("ratios_by_build")
    if by_build is None:
        return (
            f"**{v['ratio_kvbudget_over_vidur_cpu']}x** per CPU second "
            f"({v['ratio_kvbudget_over_vidur_wall']}x per wall second; kvbudget's figure "
            "includes its own start-up)."
        )
    if not by_build:
        return "no kvbudget run at that count ran."
    parts = [
        f"**{r['cpu']}x** per CPU second ({r['wall']}x per wall second) on the {build} build"
        for build, r in by_build.items()
    ]
    return "; ".join(parts) + " (kvbudget's figures include its own start-up)."


def _rows_by(name: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["client"], r["concurrency"]): r for r in _load(name)["rows"]}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}×" if value < 10 else f"{value:.0f}×"


#: issue 5's targets for the load client (targets, not results)
EVENTS_TARGET_PER_S = 50_000
PEER_TARGET_RATIO = 6.0
BARE_TARGET_RATIO = 0.5
BIAS_P50_TARGET_MS = 0.5
BIAS_P99_TARGET_MS = 5.0


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def client_overhead_findings() -> str:
    """The sentences under the client-overhead tables, every figure computed from both raw runs."""
    runs = {
        "latest": _rows_by("client_overhead.json"),
        "earlier": _rows_by("client_overhead_earlier_run.json"),
    }
    out: list[str] = []
    for label, rows in runs.items():
        streams = sorted({c for (_, c) in rows})
        parts = []
        for c in streams:
            k = rows.get(("kvbudget", c), {})
            ratios = [
                _x(_ratio(k.get("requests_per_s"), rows.get((peer, c), {}).get("requests_per_s")))
                for peer in ("aiperf", "guidellm")
            ]
            parts.append(f"{ratios[0]} / {ratios[1]} at {c} stream{'s' if c > 1 else ''}")
        cpu = [
            _ratio(
                rows.get((peer, c), {}).get("client_process_cpu_ms_per_request"),
                rows.get(("kvbudget", c), {}).get("client_process_cpu_ms_per_request"),
            )
            for c in streams
            for peer in ("aiperf", "guidellm")
        ]
        cpu_known = [v for v in cpu if v is not None]
        held = ", ".join(
            f"{peer} {rows[(peer, c)]['max_inflight']} of {c}"
            for c in streams
            if c > 1
            for peer in ("aiperf", "guidellm")
            if (peer, c) in rows
        )
        kv_held = ", ".join(
            f"{rows[('kvbudget', c)]['max_inflight']} of {c}"
            for c in streams
            if c > 1 and ("kvbudget", c) in rows
        )
        out.append(
            f"* **Against the peers ({label} run):** kvbudget's requests/s over AIPerf's / "
            f"GuideLLM's: {'; '.join(parts)}; at "
            + (
                f"{min(cpu_known):.0f}–{max(cpu_known):.0f}× less client process CPU per request"
                if cpu_known
                else "an unknown CPU ratio"
            )
            + f"; streams in flight (server-side maximum): kvbudget {kv_held}; {held}."
        )
    out.append("* **Against the targets of issue 5**, per run:")
    for label, rows in runs.items():
        k = {c: r for (client, c), r in rows.items() if client == "kvbudget"}
        events = ", ".join(
            f"{r['events_per_s']:,.0f} at {c} ({r['max_inflight']} of {c} in flight)"
            for c, r in sorted(k.items())
        )
        events_ok = [
            c
            for c, r in sorted(k.items())
            if r["events_per_s"] >= EVENTS_TARGET_PER_S and r["max_inflight"] == c
        ]
        peer_ratio = {
            c: _ratio(
                r["requests_per_s"],
                max(
                    (
                        rows[(p, c)]["requests_per_s"]
                        for p in ("aiperf", "guidellm")
                        if (p, c) in rows
                    ),
                    default=None,
                ),
            )
            for c, r in sorted(k.items())
        }
        bare = {
            c: _ratio(r["requests_per_s"], rows.get(("bare", c), {}).get("requests_per_s"))
            for c, r in sorted(k.items())
        }
        p50 = k.get(1, {}).get("ttft_bias_ms_p50")
        p99 = k.get(64, {}).get("ttft_bias_ms_p99")
        out += [
            f"  - {label}: ≥ {EVENTS_TARGET_PER_S:,} events/s with every stream in flight: "
            f"{_met(bool(events_ok))}"
            + (f" at {', '.join(map(str, events_ok))} streams" if events_ok else "")
            + f" ({events});",
            f"  - {label}: over {PEER_TARGET_RATIO:g}× the best peer's requests/s: "
            + ", ".join(
                f"{_x(v)} at {c} ({_met(v is not None and v > PEER_TARGET_RATIO)})"
                for c, v in peer_ratio.items()
            )
            + ";",
            f"  - {label}: within 2× of the bare client (kvbudget / bare requests/s ≥ "
            f"{BARE_TARGET_RATIO:g}): "
            + ", ".join(
                f"{'—' if v is None else f'{v:.2f}'} at {c} "
                f"({_met(v is not None and v >= BARE_TARGET_RATIO)})"
                for c, v in bare.items()
            )
            + ";",
            f"  - {label}: TTFT bias p50 under {BIAS_P50_TARGET_MS:g} ms at 1 stream: "
            f"{'—' if p50 is None else f'{p50:.2f} ms'} "
            f"({_met(p50 is not None and p50 < BIAS_P50_TARGET_MS)}); p99 under "
            f"{BIAS_P99_TARGET_MS:g} ms at 64 streams: {'—' if p99 is None else f'{p99:.1f} ms'} "
            f"({_met(p99 is not None and p99 < BIAS_P99_TARGET_MS)}), the bare client "
            f"{rows.get(('bare', 64), {}).get('ttft_bias_ms_p99', float('nan')):.1f} ms.",
        ]
    floor = [
        rows[("aiohttp-floor", 64)]["client_cpu_ms_per_request_run"]
        for rows in runs.values()
        if ("aiohttp-floor", 64) in rows
    ]
    own = [
        rows[("kvbudget", 64)]["client_cpu_ms_per_request_run"]
        - rows[("aiohttp-floor", 64)]["client_cpu_ms_per_request_run"]
        for rows in runs.values()
        if ("aiohttp-floor", 64) in rows and ("kvbudget", 64) in rows
    ]
    if floor and own:
        out.append(
            f"* **Where kvbudget's CPU goes (64 streams, load window):** "
            f"{min(floor):.2f}–{max(floor):.2f} ms/request is aiohttp's own floor; "
            f"{min(own):.2f}–{max(own):.2f} ms/request is kvbudget's on top of it (SSE split and "
            "timestamps, one JSON parse of the whole stream, the pydantic record, the JSONL "
            "append). The rest of the gap to the bare client is aiohttp's."
        )
    loads = {
        label: _load(name)["loadavg_after"][0]
        for label, name in (
            ("latest", "client_overhead.json"),
            ("earlier", "client_overhead_earlier_run.json"),
        )
    }
    out.append(
        "* Load average (1 min) when each run ended: "
        + ", ".join(f"{label} {v:.1f}" for label, v in loads.items())
        + "."
    )
    return "\n".join(out)


def sim_speed_findings() -> str:
    """The workload and the reading of the simulator-speed table, from ``sim_speed.json``."""
    data = _load("sim_speed.json")
    rep = data.get("replica", {})
    host = data.get("host", {})
    runs = data.get("runs", [])
    out = [
        f"Workload: {rep.get('model')} on one {rep.get('gpu')} replica built by `make_plan` "
        f"({rep.get('num_gpu_blocks', 0):,} blocks of 16 tokens, `max_num_seqs` "
        f"{rep.get('max_num_seqs')}, `max_num_batched_tokens` {rep.get('max_num_batched_tokens')}); "
        f"Poisson arrivals at {data.get('rate_requests_per_s')} req/s per replica, below the "
        f"replica's simulated saturation of {data.get('saturation_requests_per_s')} req/s (an "
        f"all-at-once burst). Host: Python {host.get('python')}, {host.get('machine')}, "
        f"{host.get('cpus')} CPUs, load average at the start "
        + "/".join(f"{v:.1f}" for v in host.get("loadavg_at_start", []))
        + ".",
        "",
    ]

    def pick(**want: Any) -> list[dict[str, Any]]:
        return [
            r
            for r in runs
            if all(r.get(k, "builtin" if k == "hash_algo" else None) == v for k, v in want.items())
        ]

    single = pick(prefix_caching=True, replicas=1, hash_algo="builtin")
    if single:
        met = [f"{r['requests']:,}" for r in single if r["requests_per_cpu_s"] >= 10_000]
        miss = [f"{r['requests']:,}" for r in single if r["requests_per_cpu_s"] < 10_000]
        out.append(
            "* **Target (≥ 10,000 simulated requests per CPU-second, caching on, one replica):** "
            + (f"met at {', '.join(met)} requests" if met else "not met at any size")
            + (f"; not met at {', '.join(miss)}" if miss else "")
            + "."
        )
        first, last = single[0], single[-1]
        change = last["requests_per_cpu_s"] / first["requests_per_cpu_s"] - 1
        out.append(
            f"* **Scaling with requests:** {first['requests_per_cpu_s']:,} req/CPU-s at "
            f"{first['requests']:,} requests, {last['requests_per_cpu_s']:,} at "
            f"{last['requests']:,} ({change:+.0%})."
        )
    builtin = pick(prefix_caching=True, replicas=1, hash_algo="builtin", requests=10_000)
    sha = pick(prefix_caching=True, replicas=1, hash_algo="sha256", requests=10_000)
    if builtin and sha:
        out.append(
            f"* **Hash function:** `sha256` {sha[0]['requests_per_cpu_s']:,} vs `builtin` "
            f"{builtin[0]['requests_per_cpu_s']:,} req/CPU-s at 10,000 requests."
        )
    rr = [r for r in runs if r.get("router") == "round_robin"]
    cost = [r for r in runs if r.get("router") == "cost"]
    if rr:
        out.append(
            "* **Scaling with replicas (round robin):** "
            + ", ".join(f"{r['requests_per_cpu_s']:,} at {r['replicas']}" for r in rr)
            + " req/CPU-s"
            + (
                f"; the `cost` router at {cost[0]['replicas']}: {cost[0]['requests_per_cpu_s']:,}"
                if cost
                else ""
            )
            + "."
        )
    fast = data.get("fast_path_vs_explicit")
    if fast:
        out.append(
            f"* **Event skipping:** the lazy-decode fast path vs stepping `EngineCore` every "
            f"step, {fast['requests']:,} requests: {fast['fast_cpu_s']:.3f} vs "
            f"{fast['explicit_cpu_s']:.3f} CPU s ({fast['speedup']:.1f}×)."
        )
    return "\n".join(out)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0%}"


def calibrate_validation(name: str) -> str:
    """Predicted vs measured p50s of a raw ``calibrate --validate`` report
    (``bench/vllm_calibrate.py``, ``bench/llamacpp_calibrate.py``)."""
    raw = _load(name)
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


def _ab_bytecode(data: dict[str, Any]) -> str:
    """What a ``bench/sim_ab.py`` file says of the trees' bytecode caches (files since
    2026-12-03 write them first; earlier ones do not say)."""
    done = data.get("bytecode")
    if not done:
        return ""
    if all(str(v).startswith("compiled") for v in done.values()):
        return " Both trees' bytecode caches were written before the rounds (`compileall`)."
    return f" Bytecode caches: {'; '.join(f'{k}: {v}' for k, v in done.items())}."


def sim_ab(name: str) -> str:
    """Two builds or trees of ``kvbudget sim`` run at the same time, round by round."""
    data = _load(name)
    labels, host = data["labels"], data["host"]
    first = next((r for r in data["rounds"] if r.get("before", {}).get("ran")), {})
    builds = {k: first.get(k, {}).get("simulator_build", "?") for k in ("before", "after")}
    timing = first.get("after", {}).get("timing_model", "roofline")
    out = [
        f"Measured by `bench/sim_ab.py` on {data['started_utc']} UTC, commit "
        f"`{data.get('commit') or '?'}`, on this shared host ({host['cpus']} vCPUs; load "
        f"average {host['loadavg_at_start'][0]:.1f} at the start, "
        f"{data['loadavg_at_end'][0]:.1f} at the end): {data['requests']:,} requests, the "
        f"issue-18 workload (simulated, {timing} timing model), both sides' whole `kvbudget sim` "
        "processes at the same time in each round; CPU s is each process's own. "
        f"Before: {labels['before']}, which ran as *{builds['before']}*. After: "
        f"{labels['after']}, which ran as *{builds['after']}*.{_ab_bytecode(data)} Raw result: "
        f"[`bench/results/{name}`](../bench/results/{name}).",
        "",
        "| round | before CPU s | after CPU s | before requests / CPU s | after requests / CPU s "
        "| speed-up (CPU) | peak RSS MB before / after | same results |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for i, r in enumerate(data["rounds"], 1):
        b, a = r.get("before", {}), r.get("after", {})
        if not (b.get("ran") and a.get("ran")):
            out.append(f"| {i} | did not run: {b.get('reason') or a.get('reason')} |||||||")
            continue
        out.append(
            f"| {i} | {b['cpu_s']:.1f} | {a['cpu_s']:.1f} | {b['requests_per_cpu_s']:,} | "
            f"{a['requests_per_cpu_s']:,} | {r['speedup_cpu']:.2f}x | "
            f"{b['peak_rss_bytes'] / 1e6:,.0f} / {a['peak_rss_bytes'] / 1e6:,.0f} | "
            f"{'yes' if r['same_results'] else '**no**'} |"
        )
    return "\n".join(out)


def trace_replay(name: str) -> str:
    """Whole-process peak RSS of a trace replay (``bench/trace_replay.py``)."""
    data = _load(name)
    w = data["workload"]
    out = [
        _measured_by("trace_replay.py", data) + " Each row is one whole `kvbudget sim "
        "--scenario` process replaying a JSONL trace (its own CPU and peak RSS). Workload "
        f"(simulated, roofline timing model): {w['model']} on one {w['gpu']}; trace: "
        f"{w['trace']}. Simulator build: {_sim_builds(data['runs'])}. "
        f"Raw result: [`bench/results/{name}`](../bench/results/{name}).",
        "",
        "| trace lines | trace file (MB) | requests completed | CPU s | requests / CPU s | "
        "peak RSS (MB) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["runs"]:
        if not r.get("ran"):
            out.append(f"| {r['trace_lines']:,} | did not run ||||")
            continue
        out.append(
            f"| {r['trace_lines']:,} | {r['trace_bytes'] / 1e6:,.0f} | "
            f"{r['requests_completed']:,} | {r['cpu_s']:.1f} | "
            f"{round(r['trace_lines'] / r['cpu_s']):,} | {r['peak_rss_bytes'] / 1e6:,.0f} |"
        )
    return "\n".join(out)


BLOCKS: dict[str, Callable[[], str]] = {
    "sim-mypyc-ab": lambda: sim_ab("sim_mypyc_ab.json"),
    "sim-mypyc-ab-trace-scale": lambda: sim_ab("sim_mypyc_ab_1m.json"),
    "sim-scale": lambda: sim_scale("sim_scale.json"),
    "sim-scale-earlier": lambda: sim_scale("sim_scale_earlier_run.json"),
    "sim-scale-concurrent": lambda: sim_scale("sim_scale_concurrent_run.json"),
    "sim-scale-concurrent-first": lambda: sim_scale("sim_scale_concurrent_first_run.json"),
    "sim-scale-repeat": lambda: sim_scale("sim_scale_repeat_run.json"),
    "sim-scale-measured": lambda: sim_scale("sim_scale_measured.json"),
    "sim-scale-builds": lambda: sim_scale("sim_scale_builds.json"),
    "sim-scale-measured-busy": lambda: sim_scale("sim_scale_measured_busy.json"),
    "sim-scale-measured-earlier": lambda: sim_scale("sim_scale_measured_earlier_run.json"),
    "sim-scale-measured-before": lambda: sim_scale("sim_scale_measured_before.json"),
    "sim-scale-measured-first": lambda: sim_scale("sim_scale_measured_first.json"),
    "sim-ab-simspeed": lambda: sim_ab("sim_ab_simspeed.json"),
    "sim-ab-measured-speed": lambda: sim_ab("sim_ab_measured_speed.json"),
    "sim-ab-kept-answers": lambda: sim_ab("sim_ab_kept_answers.json"),
    "sim-ab-block-loops": lambda: sim_ab("sim_ab_block_loops.json"),
    "sim-ab-itl-pack": lambda: sim_ab("sim_ab_itl_pack.json"),
    "sim-ab-session": lambda: sim_ab("sim_ab_session.json"),
    "trace-replay": lambda: trace_replay("trace_replay.json"),
    "client-overhead": lambda: client_overhead("client_overhead.json"),
    "client-overhead-earlier": lambda: client_overhead("client_overhead_earlier_run.json"),
    "sim-speed": sim_speed,
    "sim-fastpath-hybrid": lambda: sim_fastpath_hybrid("sim_fastpath_hybrid.json"),
    "sim-fastpath-hybrid-earlier": lambda: sim_fastpath_hybrid(
        "sim_fastpath_hybrid_earlier_run.json"
    ),
    "llamacpp": llamacpp,
    "client-overhead-findings": client_overhead_findings,
    "sim-speed-findings": sim_speed_findings,
    "llamacpp-calibrate": lambda: calibrate_validation("llamacpp_calibrate.json"),
}
#: the generated blocks of docs/calibration.md
CALIBRATION_BLOCKS: dict[str, Callable[[], str]] = {
    "vllm-calibrate": lambda: calibrate_validation("vllm_calibrate.json")
}


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
