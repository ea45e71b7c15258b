"""``kvbudget capacity --base-url`` against a live server, and the structural truths every such
search must show whatever the machine's speed (the answers themselves depend on it).

Checked on every engine (kvbudget serve, vLLM's CPU build, llama.cpp):

* each answer lies between bracket bounds that were both probed: a point at the answer that met
  the SLO and, unless the search reached its cap, a point just above it that did not (the
  concurrency's at answer + 1; the rate's within the tolerance), whose binding constraint is
  named (an SLO term, ``queue_growth`` or ``kv_pool``);
* ``/metrics`` was read at each step: every point carries the engine's requests waiting (and KV
  usage, where the engine exports it);
* a step whose SLO was clearly broken stopped early: it sent fewer requests than planned or
  aborted those in flight, and every request sent is accounted (the warm-up plus each point's
  ``num_sent`` is the total);
* the figures are labelled as the engine reports itself.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

SLO_TERMS = ("ttft", "tpot", "itl", "e2e", "goodput")
#: the live searches' requests: short prompts, OUTPUT_TOKENS tokens each
INPUT_TOKENS = 16
OUTPUT_TOKENS = 4


SEARCH_ARGS = (
    *("--input-tokens", str(INPUT_TOKENS), "--output-tokens", str(OUTPUT_TOKENS)),
    *("--num-requests", "20", "--seeds", "1", "--rate-tolerance", "0.5"),
)


#: a real engine's searches: each request this many tokens long, so one request's service time
#: ``s`` (hundreds of ms on a tiny model) stands far above the client's and the machine's jitter
ENGINE_OUTPUT_TOKENS = 64

ENGINE_SEARCH_ARGS = (
    *("--input-tokens", str(INPUT_TOKENS), "--output-tokens", str(ENGINE_OUTPUT_TOKENS)),
    *("--num-requests", "20", "--seeds", "1", "--rate-tolerance", "0.5"),
)


def service_s(
    base_url: str, model: str, *, repeats: int = 3, output_tokens: int = ENGINE_OUTPUT_TOKENS
) -> float:
    """Median seconds of one ``/v1/completions`` request of ``output_tokens`` tokens sent alone:
    the engine's service time on this machine now."""
    body = json.dumps(
        {
            "model": model,
            "prompt": "one two three four five six seven eight nine ten eleven twelve",
            "max_tokens": output_tokens,
            "ignore_eos": True,
        }
    ).encode()
    times = []
    for _ in range(repeats):
        req = urllib.request.Request(
            base_url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        started = time.perf_counter()
        with urllib.request.urlopen(req, timeout=300) as resp:
            resp.read()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def one_slot_slo(service: float, statistic: str = "p95") -> str:
    """A TTFT ceiling (``statistic``: ``p95`` or ``p50``) between what one slot serves and what
    it cannot.

    An engine that serves one request at a time (vLLM ``--max-num-seqs 1``, llama.cpp ``-np 1``)
    under a closed loop of ``c`` users is a FIFO queue: each request waits for the ``c - 1``
    ahead of it, TTFT about ``(c - 1) s`` for every request, so its p50 and p95 are alike. Under
    ``2.5 s``: one user (TTFT a prefill, a small part of ``s``) and two (about ``s``) meet it;
    four (``3 s``) do not, nor does any higher load unless the machine ran seven times faster
    than when ``s`` was measured; so the search finds a failing bound below its ceiling of 20
    users whatever this machine's speed. ``p50`` for an engine whose lone requests' TTFT jumps
    now and then on this host (vLLM's CPU build: 19 ms to 1.2 s for identical requests sent
    alone on a busy two-core machine): two such jumps put a p95 of 20 requests over the ceiling
    at any rate, and the search then walks the rate down into probes longer than its budget.
    """
    return f"ttft_{statistic}<{2.5 * service * 1e3:.0f}ms"


def run_capacity(base_url: str, model: str, *args: str, timeout_s: float = 600) -> dict[str, Any]:
    """``kvbudget capacity --base-url ... --json`` in a child process; its answer, or the test
    fails with its stderr."""
    cmd = [sys.executable, "-m", "kvbudget", "capacity", "--base-url", base_url]
    cmd += ["--model", model, "--metrics-url", base_url + "/metrics", "--json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, (
        f"kvbudget capacity failed ({done.returncode}):\n{done.stderr[-3000:]}"
    )
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _named(binding: str | None) -> bool:
    return binding in ("queue_growth", "kv_pool") or (
        binding is not None and binding.split("_")[0] in SLO_TERMS
    )


def points_table(doc: dict[str, Any]) -> str:
    """One line per probed point (kind, load, verdict, failing terms, requests sent): what a
    failed search did, for its assertion message."""
    rows = []
    for kind in ("concurrency_points", "rate_points"):
        for p in doc.get(kind, []):
            rows.append(
                f"  {kind.split('_')[0]:<11} {p['load']:>9.4g} "
                f"{'meets' if p['meets_slo'] else 'fails':<5} {','.join(p.get('failing', [])):<24} "
                f"sent {p['num_sent']}/{p['num_requests']} ok {p['num_ok']} "
                f"{p.get('stopped_early') or ''}"
            )
    return "\n".join(rows)


def check_search(doc: dict[str, Any], *, warmup: int, kv_usage: bool) -> None:
    """The structural truths above (``kv_usage``: the engine exports its KV usage)."""
    assert doc["stopped"] is None, (
        f"the budget stopped the search: {doc['stopped']}\n{points_table(doc)}"
    )
    conc = doc["concurrency_points"]
    rate = doc["rate_points"]
    # concurrency: the answer met the SLO, answer + 1 was probed and did not
    best = doc["max_concurrency"]
    assert best is not None, "not even one request at a time met the SLO"
    assert any(p["load"] == best and p["meets_slo"] for p in conc)
    above = [p for p in conc if p["load"] == best + 1]
    assert above and not any(p["meets_slo"] for p in above), "no failing bound probed"
    assert _named(doc["binding_constraint_concurrency"]), doc["binding_constraint_concurrency"]
    # rate: the answer met the SLO in its longest run, a higher rate within the tolerance failed
    top = doc["max_rate_per_s"]
    assert top is not None, "no rate met the SLO"
    assert any(p["load"] == top and p["meets_slo"] for p in rate)
    failing = [p["load"] for p in rate if not p["meets_slo"] and p["load"] > top]
    tolerance = doc["tolerance"] * (1 + 1e-9)
    assert any(f - top <= tolerance * f for f in failing), f"no failing bound near {top}"
    assert _named(doc["binding_constraint"]), doc["binding_constraint"]
    # /metrics read at each step
    for p in conc + rate:
        assert "num_waiting_max" in p, p
        assert ("kv_usage_max" in p) == kv_usage, p
    # a clearly broken step stopped early, every request accounted
    stopped = [p for p in conc + rate if p.get("stopped_early")]
    assert stopped, "no step stopped early"
    for p in stopped:
        assert not p["meets_slo"] and p["failing"]
        assert p["stopped_early"].startswith(p["failing"][0] + ":"), p
    # the stop cut the probe short: requests left unsent, or aborted in flight (recorded as
    # cancelled, so fewer finished ok than were sent: an open loop at a high rate has sent all
    # its requests before enough of them finish to settle a median)
    assert any(p["num_sent"] < p["num_requests"] or p["num_ok"] < p["num_sent"] for p in stopped), (
        f"no stopped step was cut short\n{points_table(doc)}"
    )
    assert all(
        p["num_sent"] == p["num_requests"] for p in conc + rate if not p.get("stopped_early")
    )
    assert doc["num_requests_sent"] == warmup + sum(p["num_sent"] for p in conc + rate)
