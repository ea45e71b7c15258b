"""Probe a running OpenAI-compatible engine: the acceptance's HTTP target, which drives the load
with ``kvbudget bench``'s runner (:func:`kvbudget.load.run.run_load`: every request accounted,
errors and cancellations recorded) and scrapes the engine's ``/metrics`` as a probe starts, every
``scrape_interval_s`` while it runs and once as it ends (KV usage, requests waiting, the
preemptions counter). The interval is ``kvbudget bench``'s ``--scrape-interval`` (1 s): a scrape
is not free for the engine. Measured on llama.cpp's ``llama-server`` (llama-cpp-python 0.3.36,
one slot, 64-token requests one at a time, this repository's 2-core CPU machine): 3.3 requests/s
unscraped, 2.6 scraped every 1 s, 0.96 every 0.5 s and 0.29 every 0.1 s (by hand, 2026-12-02;
see docs/commands/capacity.md), so a fast scrape would measure the scraping. A probe stops as soon as its SLO
is clearly broken (:mod:`kvbudget.maxload.early_stop`): nothing more is sent, the requests in
flight are recorded as cancelled, and the budget is charged only what was sent.

One server serves every probe (its prefix cache carries over, as it would in production). The
figures are *measured*, naming the engine the server reports; ``kvbudget serve`` reports itself,
and its figures stay *simulated* (:class:`kvbudget.accept.targets.http.HttpTarget`).
"""

from __future__ import annotations

from typing import Any

from kvbudget.accept.targets.base import TargetInfo
from kvbudget.accept.targets.http import HttpTarget, RunAsync
from kvbudget.maxload.probe import Budget, EarlyStopProbe
from kvbudget.maxload.slo import Slo

#: seconds between two scrapes of the engine's /metrics during a probe (bench's default)
SCRAPE_INTERVAL_S = 1.0


def http_probe(
    *,
    base_url: str,
    model: str,
    run_async: RunAsync,
    workload: dict[str, Any],
    slo: Slo,
    num_requests: int,
    budget: Budget,
    metrics_url: str | None = None,
    scrape_interval_s: float | None = None,
    api_key_env: str | None = None,
    timeout_s: float = 120.0,
    seed: int = 0,
) -> tuple[EarlyStopProbe, TargetInfo]:
    """A probe on the endpoint, and what the endpoint says it is (a one-line TargetError when
    it cannot be reached)."""
    target = HttpTarget(
        base_url=base_url,
        model=model,
        run_async=run_async,
        metrics_url=metrics_url,
        api_key_env=api_key_env,
        timeout_s=timeout_s,
        seed=seed,
        scrape_interval_s=scrape_interval_s or SCRAPE_INTERVAL_S,
    )

    probe = EarlyStopProbe(target, workload, slo, num_requests=num_requests, budget=budget)
    return probe, target.info
