"""One call that summarises a run (or one matrix cell) from its RequestRecords.

``summarize_run(records, rng)`` returns TTFT / TPOT / ITL (per token and per chunk) / E2E /
queue summaries (percentiles with CIs, counts, warnings), throughput and, with an SLO,
goodput. ``RunSummary.flat()`` gives the flat keys the CLIs print in ``--json``
(``ttft_p50_s``, ``ttft_p99_s``, ``tpot_p50_s``, ``itl_p99_s``, ``requests_per_s``, …).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvbudget.metrics.latency import LATENCY_METRICS, collect_latencies
from kvbudget.metrics.slo import Goodput, SloSpec, goodput
from kvbudget.metrics.summary import DEFAULT_PERCENTILES, DistributionSummary, summarize
from kvbudget.metrics.throughput import Throughput, throughput
from kvbudget.records import RequestRecord


@dataclass(frozen=True, slots=True)
class RunSummary:
    latency: dict[str, DistributionSummary]
    throughput: Throughput
    goodput: Goodput | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def flat(self) -> dict[str, float | int | None]:
        """``<metric>_p<q>_s`` for every latency summary, plus counts and rates."""
        out: dict[str, float | int | None] = {}
        for name, summ in self.latency.items():
            base = name.removesuffix("_s")
            for key, est in summ.percentiles.items():
                out[f"{base}_{key}_s"] = est.value
            out[f"{base}_mean_s"] = summ.mean
            out[f"{base}_n"] = summ.n
        tp = self.throughput
        out.update(
            requests_total=tp.num_requests,
            requests_ok=tp.num_ok,
            requests_error=tp.num_error,
            requests_cancelled=tp.num_cancelled,
            requests_per_s=tp.requests_per_s,
            output_tokens_per_s=tp.output_tokens_per_s,
            prompt_tokens_per_s=tp.prompt_tokens_per_s,
        )
        if self.goodput is not None:
            out["goodput_requests_per_s"] = self.goodput.goodput_requests_per_s
            out["goodput_fraction"] = self.goodput.goodput_fraction
        return out


def summarize_run(
    records: Iterable[RequestRecord],
    rng: np.random.Generator,
    *,
    slo: SloSpec | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    confidence: float = 0.95,
    num_bootstrap: int = 1000,
    include_warmup: bool = False,
) -> RunSummary:
    """Summaries of every latency metric, throughput and (with ``slo``) goodput."""
    recs = list(records)
    samples = collect_latencies(recs, include_warmup=include_warmup)
    latency: dict[str, DistributionSummary] = {}
    warnings: list[str] = []
    for metric in LATENCY_METRICS:
        summ = summarize(
            samples.get(metric),
            rng,
            metric=metric,
            percentiles=percentiles,
            confidence=confidence,
            num_bootstrap=num_bootstrap,
        )
        latency[metric] = summ
        if summ.n > 0:
            warnings.extend(summ.warnings)
    tp = throughput(recs, include_warmup=include_warmup)
    gp = goodput(recs, slo, include_warmup=include_warmup) if slo is not None else None
    return RunSummary(latency, tp, gp, tuple(warnings))
