"""Render docs/accuracy.md's generated blocks from bench/results/ (no figure typed by hand).

Each block sits between ``<!-- generated:NAME:begin -->`` and ``<!-- generated:NAME:end -->``.

    python scripts/render_accuracy.py           # rewrite the blocks
    python scripts/render_accuracy.py --check   # exit 1 if a block is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "accuracy.md"
#: the three predictions of a row, as the table names them
SIDES = (
    ("kvbudget_measured", "kvbudget sim, measured"),
    ("aic_static", "aiconfigurator static"),
    ("kvbudget_roofline", "kvbudget sim, roofline"),
)
DENSE = ("Qwen/Qwen3-32B", "meta-llama/Llama-3.1-70B", "nvidia/Llama-3.1-8B-Instruct-FP8")


def _errors(rows: list[dict[str, Any]], side: str, metric: str) -> list[float]:
    out = []
    for r in rows:
        got = r.get(side, {}).get(metric)
        want = r["measured"][metric]
        if got is not None and want:
            out.append(abs(got - want) / want)
    return sorted(out)


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    pos = (len(values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def _cell(rows: list[dict[str, Any]], side: str, metric: str) -> str:
    errs = _errors(rows, side, metric)
    if not errs:
        return "—"
    return f"{_quantile(errs, 0.5) * 100:.0f} / {_quantile(errs, 0.9) * 100:.0f} % ({len(errs)})"


def _table(groups: dict[tuple[str, ...], list[dict[str, Any]]], head: list[str]) -> list[str]:
    cols = [f"{name}: {m}" for _key, name in SIDES for m in ("TTFT", "TPOT")]
    out = [
        "| " + " | ".join([*head, "rows", *cols]) + " |",
        "|" + "---|" * len(head) + "---:|" + "---:|" * len(cols),
    ]
    for key in sorted(groups):
        rows = groups[key]
        cells = [
            _cell(rows, side, metric)
            for side, _name in SIDES
            for metric in ("mean_ttft_ms", "mean_tpot_ms")
        ]
        out.append("| " + " | ".join([*key, str(len(rows)), *cells]) + " |")
    return out


def _by_commit(done: list[dict[str, Any]]) -> str:
    """Which code simulated which rows, when the file was combined from runs at several."""
    counts = Counter(str(r.get("commit", "")) for r in done)
    if len(counts) < 2:
        return ""
    parts = ", ".join(f"{n} by kvbudget {commit}" for commit, n in counts.most_common())
    return f" ({parts}: runs at different commits, combined)"


def latency(name: str = "gpu_accuracy.json") -> str:
    """Median / p90 |error| per model, GPU and regime; the headline; the rows not simulated."""
    data = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    rows = data["rows"]
    done = [r for r in rows if r["status"] == "simulated"]
    by_case: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    by_kind: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    by_client: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in done:
        by_case[(r["model"], r["system"], r["regime"])].append(r)
        kind = "dense" if r["model"] in DENSE else "MoE"
        by_kind[(kind, r["regime"])].append(r)
        by_kind[(kind, "all")].append(r)
        by_kind[("all", "all")].append(r)
        by_client[(kind, r.get("client", "fixed"))].append(r)
    clients = data.get("clients", {"fixed": "fixed lengths, every slot starting at once"})
    out = [*_headline(by_kind), ""]
    out += [
        f"Raw file: `bench/results/{name}` (aiconfigurator-core {data['aiconfigurator_core']}, "
        f"kvbudget {data['commit']}, {data['wall_s']:,.0f} s wall, load average "
        f"{data['load_average'][0]:.1f} at the end). {len(done)} of {len(rows)} vLLM agg rows "
        f"simulated{_by_commit(done)}. Each cell: median / p90 of |predicted - measured| / measured over the rows "
        "(rows with that figure). Measured: the row's real vLLM run; kvbudget: `kvbudget sim` "
        f"closed loop at the row's concurrency, {data['requests_per_slot']} requests per slot "
        f"(at least {data['min_requests']}), the client that measured the row: "
        + "; ".join(f"**{key}**: {text}" for key, text in clients.items())
        + "; aiconfigurator static: `AicEngine.run_static` (the whole batch prefilled, then "
        "decoded together) on the same tables.",
        "",
        *_table(by_kind, ["models", "regime"]),
        "",
        *_table(by_client, ["models", "client"]),
        "",
        *_table(by_case, ["model", "GPU", "regime"]),
    ]
    skipped = Counter(r["reason"] for r in rows if r["status"] != "simulated")
    models: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r["status"] != "simulated":
            models[r["reason"]].add(r["model"])
    out += ["", "Rows not simulated, by reason (each row is in the raw file with it):", ""]
    out += ["| reason | rows | models |", "|---|---:|---|"]
    for reason, count in skipped.most_common():
        out.append(f"| {reason} | {count} | {', '.join(sorted(models[reason]))} |")
    refused = Counter(
        r["aic_static"]["error"][:120] for r in done if "error" in r.get("aic_static", {})
    )
    if refused:
        out += ["", "aiconfigurator's static estimate refused (simulated rows):", ""]
        out += ["| its error | rows |", "|---|---:|"]
        out += [f"| {e} | {n} |" for e, n in refused.most_common()]
    return "\n".join(out)


#: issue 28's targets, median |error|: (models, metric) -> bound
TARGETS = {
    ("dense", "mean_ttft_ms"): 0.15,
    ("dense", "mean_tpot_ms"): 0.10,
    ("MoE", "mean_ttft_ms"): 0.25,
    ("MoE", "mean_tpot_ms"): 0.25,
}


def _headline(by_kind: dict[tuple[str, ...], list[dict[str, Any]]]) -> list[str]:
    """One line per target: kvbudget's measured median beside aiconfigurator's and the roofline's."""
    out = []
    for (kind, metric), bound in TARGETS.items():
        rows = by_kind.get((kind, "all"), [])
        medians = {}
        for side, _name in SIDES:
            errs = _errors(rows, side, metric)
            medians[side] = _quantile(errs, 0.5) if errs else None
        mine = medians["kvbudget_measured"]
        if mine is None:
            continue
        verdict = "met" if mine <= bound else "missed"
        others = ", ".join(
            f"{name} {medians[side] * 100:.0f} %"
            for side, name in SIDES[1:]
            if medians[side] is not None
        )
        out.append(
            f"- {kind} rows, mean {'TTFT' if 'ttft' in metric else 'TPOT'}: kvbudget sim "
            f"(measured) median |error| **{mine * 100:.0f} %** (target {bound * 100:.0f} %: "
            f"{verdict}); {others}."
        )
    return out


def _signed(rows: list[dict[str, Any]], metric: str) -> list[float]:
    """(predicted - measured) / measured of kvbudget's measured-timing sim, rows with both."""
    out = []
    for r in rows:
        got = r.get("kvbudget_measured", {}).get(metric)
        want = r["measured"][metric]
        if got is not None and want:
            out.append((got - want) / want)
    return sorted(out)


def misses(name: str = "gpu_accuracy.json") -> str:
    """Which rows miss the targets, split by what kvbudget assumed of them (models, client,
    regime) and by the sign of the miss: too high (over-predicted) or too low."""
    data = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in data["rows"]:
        if r["status"] == "simulated":
            kind = "dense" if r["model"] in DENSE else "MoE"
            groups[(kind, r.get("client", "fixed"), r["regime"])].append(r)
    head = ["models", "client", "regime"]
    cols = []
    for metric in ("TTFT", "TPOT"):
        cols += [f"{metric}: rows", f"{metric}: within target", f"{metric}: too high"]
        cols += [f"{metric}: too low", f"{metric}: median signed error"]
    out = [
        "| " + " | ".join([*head, *cols]) + " |",
        "|" + "---|" * len(head) + "---:|" * len(cols),
    ]
    for key in sorted(groups):
        cells = []
        for metric in ("mean_ttft_ms", "mean_tpot_ms"):
            bound = TARGETS[(key[0], metric)]
            errs = _signed(groups[key], metric)
            if not errs:
                cells += ["0", "—", "—", "—", "—"]
                continue
            high = sum(e > bound for e in errs)
            low = sum(e < -bound for e in errs)
            median = _quantile(errs, 0.5) * 100
            cells += [str(len(errs)), str(len(errs) - high - low), str(high), str(low)]
            cells.append(f"{median:+.0f} %")
        out.append("| " + " | ".join([*key, *cells]) + " |")
    return "\n".join(out)


def prefill_floor(name: str = "gpu_prefill_load.json") -> str:
    """Per model: the rows whose own measured TTFT and TPOT imply more work than the tables can
    price into a second (``bench/gpu_prefill_load.py``): the prefill alone, then the prefill and
    the decode steps' attention together; and their misses."""
    accuracy = {r["id"]: r for r in _rows("gpu_accuracy.json")}
    groups: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = defaultdict(list)
    for load in _rows(name):
        row = accuracy[load["id"]]
        groups[row["model"]].append((load, row))
    head = ["model", "rows priced", "prefill floor above 1", "highest prefill floor"]
    head += ["of those: TTFT too high", "of those: TPOT too high"]
    head += ["prefill + decode attention above 1", "of those: TPOT too high"]
    head += ["other rows: TPOT too high"]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for model in sorted(groups):
        pairs = groups[model]
        kind = "dense" if model in DENSE else "MoE"
        over = [row for load, row in pairs if load["prefill_busy_floor"] > 1]
        busy = [row for load, row in pairs if load["busy_floor"] > 1]
        rest = [row for load, row in pairs if load["busy_floor"] <= 1]

        def high(rows: list[dict[str, Any]], metric: str, k: str = kind) -> int:
            bound = TARGETS[(k, metric)]
            return sum(e > bound for e in _signed(rows, metric))

        top = max(load["prefill_busy_floor"] for load, _row in pairs)
        cells = [model, str(len(pairs)), str(len(over)), f"{top:.2f}"]
        cells += [str(high(over, "mean_ttft_ms")), str(high(over, "mean_tpot_ms"))]
        cells += [str(len(busy)), str(high(busy, "mean_tpot_ms"))]
        cells.append(str(high(rest, "mean_tpot_ms")))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


#: InferenceX's RANDOM_RANGE_RATIO, as bench/gpu_accuracy.py's INFERENCEX_RANGE_RATIO draws it
#: (tests/unit/test_accuracy_doc.py checks the two agree)
INFERENCEX_RANGE_RATIO = 0.8
#: a measured mean TTFT at or above this is called exploded (``docs/accuracy.md`` says so)
EXPLODED_TTFT_MS = 5000.0


def exploded(name: str = "gpu_accuracy.json") -> str:
    """The rows whose measured mean TTFT exploded (at least :data:`EXPLODED_TTFT_MS`) and what
    kvbudget's own pool said of them; then the rows kvbudget calls KV-limited that did not."""
    done = [r for r in _rows(name) if r["status"] == "simulated"]
    big = [r for r in done if r["measured"]["mean_ttft_ms"] >= EXPLODED_TTFT_MS]
    limited = [r for r in big if r["regime"] == "kv-limited"]
    exploded_ids = {r["id"] for r in big}
    calm = [r for r in done if r["regime"] == "kv-limited" and r["id"] not in exploded_ids]
    head = ["model", "GPU", "TP", "input / output", "concurrency", "measured TTFT"]
    head += ["kvbudget regime", "pool tokens / demand", "simulated TTFT", "KV dtype simulated"]
    head += ["decoding at once (from the measured means)", "pool holds (sequences)"]
    out = [
        f"{len(big)} simulated rows have a measured mean TTFT of "
        f"{EXPLODED_TTFT_MS / 1000:.0f} s or more; kvbudget's own pool calls {len(limited)} of "
        f"them KV-limited. {len(calm)} rows it calls KV-limited stayed below "
        f"{EXPLODED_TTFT_MS / 1000:.0f} s.",
        "",
        "| " + " | ".join(head) + " |",
        "|---|---|---:|---|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for r in sorted(big, key=lambda r: (r["model"], r["system"], r["tp"], r["isl"], r["osl"])):
        sim = r["kvbudget_measured"] if "error" not in r["kvbudget_measured"] else None
        used = sim or r["kvbudget_roofline"]
        label = "" if sim else " (roofline)"
        # the deployment's totals: dp engines (attention data parallel), each its own pool
        dp = r.get("data_parallel_size", 1)
        pool = used["pool_tokens"] * dp
        demand = r["concurrency"] * (r["isl"] + r["osl"])
        server = r.get("server") or {}
        applied = server.get("applied") or {}
        kv = applied.get("kv_dtype", "auto")
        if "kv_dtype" in server.get("not_applied", []):
            kv += " (its script's KV dtype changed that day)"
        cells = [r["model"], r["system"], str(r["tp"])]
        cells += [f"{r['isl']} / {r['osl']}", str(r["concurrency"])]
        cells += [f"{r['measured']['mean_ttft_ms'] / 1000:.1f} s", r["regime"]]
        cells += [f"{pool:,} / {demand:,}"]
        cells += [f"{used['mean_ttft_ms'] / 1000:.1f} s{label}", kv]
        # Little's law on the measured means: of C requests in flight, the share decoding, with
        # the client's mean output length (InferenceX draws it from [int(0.8 O), O])
        low = int(INFERENCEX_RANGE_RATIO * r["osl"])
        mean_output = (low + r["osl"]) / 2 if r["client"] == "inferencex" else r["osl"]
        decode_ms = (mean_output - 1) * r["measured"]["mean_tpot_ms"]
        busy = r["concurrency"] * decode_ms / (r["measured"]["mean_ttft_ms"] + decode_ms)
        cells += [f"{busy:.0f}", f"{pool // (r['isl'] + r['osl']):,}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def version_gap(name: str = "aic_version_gap.json") -> str:
    """aiconfigurator-core's vLLM 0.19.0 MoE tables against its 0.24.0 ones, same shapes
    (``bench/aic_version_gap.py``)."""
    head = ["model (MoE shape)", "GPU", "table dtype", "points in both"]
    head += ["decode-sized: 0.19.0 / 0.24.0", "prefill-sized: 0.19.0 / 0.24.0"]
    out = ["| " + " | ".join(head) + " |", "|---|---|---|---:|---:|---:|"]
    for r in _rows(name):
        cells = [r["model"], r["system"], r["moe_dtype"], str(r["num_points"])]
        for part in ("decode", "prefill"):
            q = r[part]
            cells.append(
                f"{q['median']:.2f} ({q['p10']:.2f}-{q['p90']:.2f}, {q['num_points']})"
                if q["num_points"]
                else "—"
            )
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _rows(name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((RESULTS / name).read_text(encoding="utf-8"))["rows"]
    return rows


BLOCKS: dict[str, Callable[[], str]] = {
    "gpu-accuracy": latency,
    "gpu-accuracy-misses": misses,
    "gpu-prefill-floor": prefill_floor,
    "gpu-accuracy-exploded": exploded,
    "gpu-version-gap": version_gap,
}


def _pattern(name: str) -> re.Pattern[str]:
    tag = f"generated:{name}"
    return re.compile(
        rf"(<!-- {re.escape(tag)}:begin -->\n)(.*?)(\n<!-- {re.escape(tag)}:end -->)", re.DOTALL
    )


def render(text: str) -> str:
    """``text`` with every generated block rewritten from its raw file."""
    for name, make in BLOCKS.items():
        body = make()
        text, n = _pattern(name).subn(lambda m, b=body: m.group(1) + b + m.group(3), text)
        if n != 1:
            raise SystemExit(f"no (or more than one) block generated:{name} in {DOC}")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a block is out of date")
    args = ap.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    if args.check:
        if new != text:
            print(f"{DOC}: generated blocks are out of date; run {sys.argv[0]}", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
