"""``--goodput``: the requests that met every given SLO, as ``vllm bench serve`` counts them.

vLLM's definition (``vllm/benchmarks/serve.py``: ``parse_goodput`` / ``check_goodput_args``
and the goodput block of ``calculate_metrics``):

* the SLOs are ``KEY:MILLISECONDS`` pairs, keys ``ttft``, ``tpot`` and ``e2el`` (end-to-end
  latency), values >= 0;
* a request is *good* when it completed and, for every given key, its value is at most the SLO
  (``slo >= value``); a completed request with one output token (or none) has TPOT 0 for this
  check, and TPOT is ``(e2el - ttft) / (output_tokens - 1)``;
* ``request_goodput = good / duration`` (requests per second).

kvbudget also gives the fraction: good requests over every measured (non-warm-up) request, so a
failed or cancelled request counts against it (it met no SLO), and over the completed ones (what
vLLM's count is taken from).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from kvbudget.errors import ConfigError
from kvbudget.records import RequestRecord

#: vLLM's valid goodput keys (``check_goodput_args``'s VALID_NAMES)
GOODPUT_KEYS: tuple[str, ...] = ("ttft", "tpot", "e2el")
_EXAMPLE = "e.g. --goodput ttft:1000,tpot:50 (milliseconds; keys ttft, tpot, e2el)"


def parse_goodput(items: str | Sequence[str] | None) -> dict[str, float]:
    """``"ttft:1000,tpot:50"`` (or vLLM's space-separated ``ttft:1000 tpot:50``) ->
    ``{"ttft": 1000.0, "tpot": 50.0}`` in milliseconds; a bad pair is a one-line error."""
    if not items:
        return {}
    texts = [items] if isinstance(items, str) else list(items)
    out: dict[str, float] = {}
    for text in texts:
        for part in str(text).replace(",", " ").split():
            key, sep, raw = part.partition(":")
            try:
                value = float(raw) if sep else math.nan
            except ValueError:
                value = math.nan
            if key not in GOODPUT_KEYS:
                raise ConfigError(
                    f"--goodput {part!r}: {key!r} is not an SLO key; use ttft, tpot or e2el "
                    f"({_EXAMPLE})",
                    field="goodput",
                )
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(
                    f"--goodput {part!r}: the value must be a number of milliseconds >= 0 "
                    f"({_EXAMPLE})",
                    field="goodput",
                )
            if key in out and out[key] != value:
                raise ConfigError(
                    f"--goodput: {key} is given twice ({out[key]:g} and {value:g} ms); give it once",
                    field="goodput",
                )
            out[key] = value
    return out


def request_values_s(rec: RequestRecord) -> dict[str, float] | None:
    """``{"ttft", "tpot", "e2el"}`` of a completed request in seconds (vLLM's definitions), or
    None when it did not complete."""
    if rec.status != "ok" or rec.ttft_s is None or rec.e2e_s is None:
        return None
    n = rec.output_tokens
    tpot = (rec.e2e_s - rec.ttft_s) / (n - 1) if n > 1 else 0.0
    return {"ttft": rec.ttft_s, "tpot": tpot, "e2el": rec.e2e_s}


def is_good(values_s: Mapping[str, float] | None, slo_ms: Mapping[str, float]) -> bool:
    """vLLM's ``all(slo >= value)`` over the given keys (a request that failed is never good)."""
    if values_s is None:
        return False
    return all(slo / 1000.0 >= values_s[key] for key, slo in slo_ms.items())


def goodput_summary(
    records: Sequence[RequestRecord], slo_ms: Mapping[str, float], window_s: float | None
) -> dict[str, Any]:
    """The goodput fields of a summary (records: the measured, non-warm-up ones)."""
    values = [request_values_s(r) for r in records]
    completed = sum(v is not None for v in values)
    good = sum(is_good(v, slo_ms) for v in values)
    return {
        "goodput_slo_ms": dict(slo_ms),
        "goodput_requests": good,
        "goodput_fraction": good / len(records) if records else None,
        "goodput_fraction_of_completed": good / completed if completed else None,
        "goodput_requests_per_s": good / window_s if window_s else None,
    }
