"""Throughput of a run or cell: requests/s and tokens/s over a measurement window.

The one definition every command uses (``bench``, ``accept``'s cells, ``sim``'s summary):

- the window of one run (a bench run segment, one repetition of an accept cell) is
  :func:`window_s`: from the first send (``sent_s``; ``scheduled_s`` only when no counted
  request was sent) to the last finish (``done_s``) of the counted records;
- over several runs (resumed segments, repetitions) the windows are added and the counts pooled
  (:func:`throughput_of_runs`), since each run has its own clock and idle time between runs is
  not serving time;
- ``requests_per_s = num_ok / window_s``,
  ``output_tokens_per_s = sum(output_tokens of ok records) / window_s``,
  ``prompt_tokens_per_s = sum(prompt_tokens of ok records) / window_s``,
  ``total_tokens_per_s`` = the two added.

Warm-up records are excluded unless asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def window_s(records: Iterable[RequestRecord]) -> float:
    """First send to last finish of one run's records (0 when nothing was sent or finished)."""
    recs = list(records)
    starts = [r.sent_s for r in recs if r.sent_s is not None]
    if not starts:
        starts = [r.scheduled_s for r in recs if r.scheduled_s is not None]
    ends = [r.done_s for r in recs if r.done_s is not None]
    if not starts or not ends:
        return 0.0
    return max(0.0, max(ends) - min(starts))


def throughput(
    records: Iterable[RequestRecord],
    *,
    start_s: float | None = None,
    end_s: float | None = None,
    include_warmup: bool = False,
) -> Throughput:
    """Requests/s and tokens/s of one run's ``records`` over its window (see module doc), or
    over ``[start_s, end_s]`` where given."""
    recs = [r for r in records if include_warmup or not r.warmup]
    if start_s is None and end_s is None:
        return _rates(recs, window_s(recs))
    starts = [r.sent_s for r in recs if r.sent_s is not None] or [
        r.scheduled_s for r in recs if r.scheduled_s is not None
    ]
    ends = [r.done_s for r in recs if r.done_s is not None]
    lo = start_s if start_s is not None else (min(starts) if starts else None)
    hi = end_s if end_s is not None else (max(ends) if ends else None)
    return _rates(recs, 0.0 if lo is None or hi is None else max(0.0, hi - lo))


def throughput_of_runs(
    runs: Iterable[Sequence[RequestRecord]], *, include_warmup: bool = False
) -> Throughput:
    """Pooled over runs with their own clocks: counts added, windows added."""
    parts = [[r for r in run if include_warmup or not r.warmup] for run in runs]
    return _rates([r for part in parts for r in part], sum(window_s(part) for part in parts))


def _rates(recs: Sequence[RequestRecord], window: float) -> Throughput:
    ok = [r for r in recs if r.status == "ok"]
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
