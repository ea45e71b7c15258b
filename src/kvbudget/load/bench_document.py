"""A load run's result document (``summary.json``): the records summarized, the client's accounting,
warnings, the engine's metrics over the run and the provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from kvbudget.engine_name import KVBUDGET_SERVE
from kvbudget.load.config import RunConfig
from kvbudget.load.diagnosis import record_digest
from kvbudget.load.identity import safe_headers
from kvbudget.load.prometheus import MetricsScraper, summarize_series
from kvbudget.load.run_dir import REQUESTS_FILE, SUMMARY_FILE, unique_records
from kvbudget.load.runner import WorkerResult
from kvbudget.load.summary import bottleneck_warnings, summarize_records
from kvbudget.metrics.run import summarize_run
from kvbudget.records import Provenance, RequestRecord, ResultDocument, read_jsonl, write_document
from kvbudget.safety.redact import redact_url


class BenchDocument(ResultDocument):
    """Result document of ``kvbudget bench`` (kind ``bench``)."""

    kind: str = "bench"
    config: dict[str, Any]
    server: dict[str, Any] = Field(default_factory=dict)
    summary: dict[str, Any] = Field(default_factory=dict)
    #: how prompts were built: tokenizer used, special tokens, requested vs built totals
    prompts: dict[str, Any] = Field(default_factory=dict)
    #: the engine's final resolved values (kvbudget.load.engine_report.EngineReport)
    engine_report: dict[str, Any] = Field(default_factory=dict)
    accounting: dict[str, Any] = Field(default_factory=dict)
    server_metrics: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)
    #: per latency metric: n, mean, percentiles with confidence intervals (kvbudget.metrics)
    statistics: dict[str, Any] = Field(default_factory=dict)
    scrape: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    #: failed requests by HTTP status / error kind with one example each (load.diagnosis)
    failures: dict[str, Any] = Field(default_factory=dict)


def finish_document(
    cfg: RunConfig,
    out_dir: Path,
    ident: dict[str, Any],
    results: list[WorkerResult],
    scraper: MetricsScraper | None,
    segment: int,
    ray_accounting: dict[str, Any] | None = None,
) -> BenchDocument:
    read = read_jsonl(out_dir / REQUESTS_FILE, RequestRecord)
    records, duplicates = unique_records(read.items)
    seg_records = [r for r in records if r.run_segment == segment]
    summary = summarize_records(records, cfg.metric_percentiles, cfg.goodput)
    offered = sum(r.offered for r in results)
    sent = sum(r.sent for r in results)
    not_sent = sum(r.not_sent for r in results)
    wall = max((r.wall_s for r in results), default=0.0)
    cpu = sum(r.cpu_s for r in results)
    busy = cpu / (wall * len(results)) if wall > 0 and results else None
    accounting = {
        "offered": offered,
        "sent": sent,
        "not_sent": not_sent,
        "recorded_this_segment": len(seg_records),
        "recorded_total": len(records),
        "sent_equals_recorded": sent == len(seg_records),
        "skipped_jsonl_lines": read.skipped_lines,
        "duplicate_records_ignored": duplicates,
        "workers": len(results),
        "client_cpu_s": cpu,
        "client_wall_s": wall,
        "client_cpu_busy_fraction": busy,
        "max_inflight_seen": sum(r.max_inflight_seen for r in results),
        "run_segment": segment,
    }
    stopped = next((r.stopped_early for r in results if r.stopped_early), None)
    if stopped is not None:
        accounting["stopped_early"] = stopped
    warnings = bottleneck_warnings(
        summary,
        open_loop=cfg.open_loop,
        cpu_busy_fraction=busy,
        not_sent=0 if stopped is not None else not_sent,  # not the client's limit: said below
    )
    if stopped is not None:
        warnings.append(
            f"stopped early ({stopped}): {not_sent} request(s) not sent, those in flight "
            "recorded as cancelled"
        )
    # percentiles with 95 % confidence intervals and small-sample warnings (seeded bootstrap
    # up to 5,000 samples, order statistics above), from the shared metrics package
    stats = summarize_run(
        [r for r in records if r.status == "ok"],
        np.random.default_rng([cfg.seed, 0x5747]),
        num_bootstrap=500,
    )
    statistics = {name: d.to_dict() for name, d in stats.latency.items() if d.n > 0}
    warnings.extend(stats.warnings)
    if duplicates:
        warnings.append(
            f"{duplicates} record(s) repeat a request id already recorded (a writer outlived "
            "a killed run?); each request id is counted once, the first record kept"
        )
    if ray_accounting is not None:
        accounting.update(ray_accounting)
        warnings.extend(_lost_warnings(ray_accounting, out_dir))
        finished = {r.worker for r in results}
        seg_records = [r for r in seg_records if r.worker in finished]
        accounting["sent_equals_recorded"] = sent == len(seg_records)
    if sent != len(seg_records):
        warnings.append(
            f"accounting: {sent} request(s) sent but {len(seg_records)} recorded in this segment"
        )
    headers = next((r.headers for r in results if r.headers), None)
    ident = {
        **ident,
        "response_headers": safe_headers(headers),
        "endpoint_url": redact_url(cfg.endpoint_url),
        "model_sent": cfg.model,
    }
    server_metrics: dict[str, dict[str, float | int | None]] = {}
    scrape_info: dict[str, Any] = {}
    if scraper is not None:
        ends = [r.done_s for r in seg_records if r.done_s is not None]
        end_s = max(ends) if ends else 0.0
        # counters include the settled scrape taken after the engine counted the last request
        window = (0.0, max(end_s, scraper.log.settled_s or end_s))
        server_metrics = summarize_series(scraper.log.samples, window=window)
        scrape_info = {
            "url": cfg.metrics_url,
            "scrapes": scraper.log.num_scrapes,
            "failures": len(scraper.log.failures),
            "first_failures": scraper.log.failures[:5],
            "engine_names": scraper.log.engine,
            "settled_s": scraper.log.settled_s,
        }
        if scraper.log.num_scrapes and scraper.log.failures:
            warnings.append(
                f"{len(scraper.log.failures)} of {scraper.log.num_scrapes} metric scrapes failed "
                f"(first: {scraper.log.failures[0][1]})"
            )
        for name, text in (("first", scraper.log.first_text), ("last", scraper.log.last_text)):
            if text is not None:
                (out_dir / f"metrics_{name}.prom").write_text(text)
    engine = ident.get("engine") or "unknown OpenAI-compatible server"
    version = ident.get("version") or {}
    own_sim = engine == KVBUDGET_SERVE
    if (ident.get("prompts") or {}).get("tokenizer") == "synthetic" and not own_sim:
        warnings.append(
            "prompt lengths are words of kvbudget's synthetic tokenizer, not tokens of the "
            "served model (no tokenizer found locally and no /tokenize + /detokenize on the "
            "server); give --tokenizer DIR for exact lengths"
        )
    note = None
    if own_sim:
        # The client timings are real, but what they time is kvbudget's own simulator: label the
        # figures simulated (as accept and audit do for the same endpoint), never measured.
        note = (
            "the engine behind this endpoint is kvbudget's simulator served over HTTP: "
            "latencies are simulated step times delivered in real time, plus real HTTP overhead"
        )
    doc = BenchDocument(
        provenance=Provenance(
            kind="simulated" if own_sim else "measured",
            engine=str(engine),
            timing_model=(str(version.get("timing_model") or "kvbudget serve"))
            if own_sim
            else None,
            engine_version=ident.get("engine_version") or "unknown",
            hardware="unknown (remote endpoint)",
            note=note,
        ),
        config=cfg.model_dump(mode="json"),
        server=ident,
        prompts=ident.get("prompts") or {},
        engine_report=ident.get("engine_report") or {},
        summary=summary,
        accounting=accounting,
        server_metrics=server_metrics,
        statistics=statistics,
        scrape=scrape_info,
        warnings=warnings,
        failures=record_digest(records),
    )
    write_document(out_dir / SUMMARY_FILE, doc)
    return doc


def _lost_warnings(ray_accounting: dict[str, Any], out_dir: Path) -> list[str]:
    """One warning per Ray worker lost mid-run: what was kept and how to finish."""
    out = []
    for w in ray_accounting.get("per_worker", []):
        if w.get("lost"):
            out.append(
                f"worker {w['worker']} (node {w['node']}) was lost mid-run ({w['lost']}); its "
                f"{w['recorded']} finished record(s) are kept in {out_dir / REQUESTS_FILE}; what "
                "it was sending is unrecorded: rerun with --resume to send the rest"
            )
    return out
