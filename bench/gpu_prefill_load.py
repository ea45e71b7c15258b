"""How much prefill the silicon rows' own measurements imply, priced by the measured tables.

A closed loop of ``C`` clients, each request a fresh prompt of ``I`` tokens and ``O`` output
tokens, completes ``C / (TTFT + (O - 1) x TPOT)`` requests a second (Little's law on the row's
measured means), and the engine must prefill every one of those prompts. This prices one
prompt's prefill with the step-time model the simulator used for the row (aiconfigurator-core's
tables through :class:`kvbudget.sim.measured.MeasuredTiming`: the prompt alone, in the row's
``max_num_batched_tokens`` chunks, each after the ones before it, no decode beside it) and
multiplies: the fraction of each second the engine must have spent prefilling, at least.

Each factor leans low: the shortest prompt the row's client draws (``int(0.8 I)`` for
InferenceX's, ``I`` for fixed lengths), the longest output (``O``: the fewest completions a
second), and no decode work counted. The one factor that does not: a prompt's chunk shares its
step's weight reads with the decodes beside it, so its cost there can be below its cost alone,
by at most what those reads cost (a decode step's weight traffic, far below a prompt's prefill
on these rows' prompts of 800 tokens and more). A floor above 1 means the row's
measured TTFT and TPOT cannot both hold for ``C`` fresh prompts at the tables' prefill prices:
either the real prefill was cheaper than the tables by at least that factor, or the engine
prefilled fewer tokens than ``C`` fresh prompts need (prefix-cache hits, a client that did not
keep ``C`` requests in flight). It is a consistency check of the row against the tables: it
changes no model, fits nothing, and runs only on rows the simulator ran with measured timing.

The second floor adds the decode steps' KV reads (``busy_floor``). Each completed request also
decodes ``Ō - 1`` tokens, the ``j``-th of them attending ``I + j`` tokens, and every decode step
pays the tables' generation attention for its sequences
(:meth:`~kvbudget.sim.measured.MeasuredTiming.decode_attention_time_s`, the term the simulator
adds to a step's shared GEMMs). Priced low: the step of the most sequences one engine runs (its
share of ``C``: the cheapest per sequence), each at the shortest mean context (the shortest
prompt plus half the shortest output), and no GEMM work for the decodes. With the mean output
``Ō`` unknown between the client's shortest and longest draws, the busy fraction
``C / (TTFT + (Ō - 1) TPOT) x (prefill + (Ō - 1) x attention per token)`` is monotone in ``Ō``,
so the floor is the lower of its two ends. Above 1, the row's measured figures cannot hold at the
tables' prices for the prefill and the KV reads together.

    python bench/gpu_prefill_load.py     # -> bench/results/gpu_prefill_load.json
    python scripts/render_accuracy.py    # docs/accuracy.md's floor table from both raw files
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_accuracy import (
    INFERENCEX_RANGE_RATIO,
    ROOT,
    _git_commit,
    _int,
    _request,
    client,
    silicon_rows,
)
from gpu_accuracy import (
    OUT as ACCURACY,
)

from kvbudget.sim.fromplan import build_replica

OUT = ROOT / "bench" / "results" / "gpu_prefill_load.json"


def prefill_s(timing: Any, prompt_tokens: int, chunk_tokens: int) -> float:
    """One prompt's prefill alone: its chunks in order, each attending to the ones before."""
    total = 0.0
    done = 0
    while done < prompt_tokens:
        n = min(chunk_tokens, prompt_tokens - done)
        total += float(timing.prefill_time_s(n, done))
        done += n
    return total


def row_load(row: dict[str, str], result: dict[str, Any]) -> dict[str, Any]:
    """The floor of the row's prefill busy fraction (see the module docstring)."""
    c, isl, osl = int(row["batch_size"]), int(row["isl"]), int(row["osl"])
    kind = client(row)
    prompt = int(isl * INFERENCEX_RANGE_RATIO) if kind == "inferencex" else isl
    built = build_replica(
        _request(row), timing_model="measured", expert_parallel=_int(row, "moe_ep_size") > 1
    )
    measured = result["measured"]
    ttft_s, tpot_s = measured["mean_ttft_ms"] / 1e3, measured["mean_tpot_ms"] / 1e3
    dp = _int(row, "attention_dp_size")
    per_engine = c / (ttft_s + (osl - 1) * tpot_s) / dp  # the clients split over DP engines
    one = prefill_s(built.timing, prompt, built.config.max_num_batched_tokens)
    prefill_busy = per_engine * one
    # the decode steps' KV reads: one engine's share of C, the shortest mean context
    shortest_output = int(osl * INFERENCEX_RANGE_RATIO) if kind == "inferencex" else osl
    seqs = max(1, c // dp)
    step_s = built.timing.decode_attention_time_s(seqs, prompt + shortest_output // 2)
    per_token_s = step_s / seqs

    def busy(output: int) -> float:
        rate = c / (ttft_s + (output - 1) * tpot_s) / dp
        return rate * (one + (output - 1) * per_token_s)

    return {
        "id": row["id"],
        "prompt_tokens": prompt,
        "prefill_ms": round(one * 1e3, 3),
        "requests_per_s_per_engine": round(per_engine, 3),
        "prefill_busy_floor": round(prefill_busy, 4),
        "decode_attention_ms_per_step": round(step_s * 1e3, 3),
        "decode_seqs_per_step": seqs,
        # the whole decode-only step of that shape (GEMMs too), for reading a row against its TPOT
        "decode_step_ms": round(
            built.timing.decode_time_s(seqs, seqs * (prompt + shortest_output // 2)) * 1e3, 3
        ),
        "busy_floor": round(min(busy(shortest_output), busy(osl)), 4),
        "timing_model": built.timing_name,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accuracy", type=Path, default=ACCURACY, help="gpu_accuracy.py's raw file")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    results = {r["id"]: r for r in json.loads(args.accuracy.read_text())["rows"]}
    started = time.time()
    out = []
    for row in silicon_rows():
        result = results.get(row["id"])
        if result is None or result.get("status") != "simulated":
            continue
        if "error" in result.get("kvbudget_measured", {"error": ""}):
            continue  # the row ran on the roofline: no measured tables to price it with
        out.append(row_load(row, result))
    doc = {
        "what": "floor of the prefill busy fraction (prefill_busy_floor), and of the prefill "
        "plus the decode steps' attention (busy_floor), each silicon row's measured mean TTFT "
        "and TPOT imply for a closed loop of fresh prompts, priced by aiconfigurator-core's "
        "tables as kvbudget sim prices them (a consistency check of the validation rows "
        "against the tables; nothing fitted, no model changed)",
        "accuracy_file": str(args.accuracy.relative_to(ROOT)),
        "commit": _git_commit(),
        "wall_s": round(time.time() - started, 1),
        "rows": out,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    over = sum(1 for r in out if r["prefill_busy_floor"] > 1)
    both = sum(1 for r in out if r["busy_floor"] > 1)
    print(
        f"{len(out)} rows, {over} with a prefill floor above 1, {both} with prefill and decode "
        f"attention -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
