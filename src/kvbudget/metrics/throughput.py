"""Throughput of a run or cell: requests/s and tokens/s over an explicit window.

The window is ``[start_s, end_s]``: by default from the earliest ``sent_s`` (else
``scheduled_s``) to the latest ``done_s`` among the counted records. Rates:

- ``requests_per_s = num_ok / window_s``
- ``output_tokens_per_s = sum(output_tokens of ok records) / window_s``
- ``prompt_tokens_per_s = sum(prompt_tokens of ok records) / window_s``
- ``total_tokens_per_s`` = the two above added.

Warm-up records are excluded unless asked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from kvbudget.records import RequestRecord


@dataclass(frozen=True, slots=True)
class Throughput:
    window_s: float
    num_requests: int
    num_ok: int
    num_error: int
    num_cancelled: int
    output_tokens: int
    prompt_tokens: int
    requests_per_s: float | None
    output_tokens_per_s: float | None
    prompt_tokens_per_s: float | None
    total_tokens_per_s: float | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def throughput(
    records: Iterable[RequestRecord],
    *,
    start_s: float | None = None,
    end_s: float | None = None,
    include_warmup: bool = False,
) -> Throughput:
    """Requests/s and tokens/s of ``records`` over the window (see module doc)."""
    recs = [r for r in records if include_warmup or not r.warmup]
    ok = [r for r in recs if r.status == "ok"]
    starts = [
        r.sent_s if r.sent_s is not None else r.scheduled_s
        for r in recs
        if r.sent_s is not None or r.scheduled_s is not None
    ]
    ends = [r.done_s for r in recs if r.done_s is not None]
    lo = (
        start_s
        if start_s is not None
        else (min(x for x in starts if x is not None) if starts else None)
    )
    hi = end_s if end_s is not None else (max(ends) if ends else None)
    window = 0.0 if lo is None or hi is None else max(0.0, hi - lo)
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens or 0 for r in ok)

    def rate(x: float) -> float | None:
        return x / window if window > 0 else None

    return Throughput(
        window_s=window,
        num_requests=len(recs),
        num_ok=len(ok),
        num_error=sum(1 for r in recs if r.status == "error"),
        num_cancelled=sum(1 for r in recs if r.status == "cancelled"),
        output_tokens=out_tok,
        prompt_tokens=in_tok,
        requests_per_s=rate(len(ok)),
        output_tokens_per_s=rate(out_tok),
        prompt_tokens_per_s=rate(in_tok),
        total_tokens_per_s=rate(out_tok + in_tok),
    )
