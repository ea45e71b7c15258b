"""A whole load run: workers, metrics scraping, server identity, resume and the summary.

Files in the output directory:

* ``run.json`` — the :class:`RunConfig` (no secrets) and the run id; ``--resume`` checks it;
* ``requests.jsonl`` — one :class:`RequestRecord` per finished request, appended by every
  worker process the moment the request ends (a SIGKILLed run keeps all finished ones);
* ``metrics.jsonl`` — unified :class:`MetricSample` rows (when ``metrics_url`` is set);
* ``summary.json`` — the :class:`BenchDocument` written at the end.

Timelines: all workers share ``t0`` on CLOCK_MONOTONIC (``time.perf_counter`` on Linux is
system-wide), so records from different worker processes are on one timeline. A resumed run
is a new ``run_segment`` with its own ``t0``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from kvbudget.errors import ConfigError, TargetError
from kvbudget.load.client import OpenAIClient, route_url
from kvbudget.load.config import RunConfig
from kvbudget.load.diagnosis import record_digest
from kvbudget.load.engine_report import read_engine_report
from kvbudget.load.identity import safe_headers, server_identity
from kvbudget.load.prometheus import MetricsScraper, summarize_series
from kvbudget.load.requests import planned_open_loop, synthetic_request
from kvbudget.load.runner import ProgressFn, StopWhen, WorkerResult, run_worker
from kvbudget.load.served_prompts import resolve_tokenizer, served_prompts
from kvbudget.load.summary import bottleneck_warnings, summarize_records
from kvbudget.load.workers import WorkerPool
from kvbudget.load.workloads import dataset_sha256, plan_dataset, plan_synthetic, plan_trace
from kvbudget.metrics.run import summarize_run
from kvbudget.records import (
    JsonlWriter,
    Provenance,
    RequestRecord,
    ResultDocument,
    read_jsonl,
    write_document,
)
from kvbudget.safety.outlock import lock_out_dir, release_out_dir
from kvbudget.safety.redact import redact_text, redact_url, secret_from_env
from kvbudget.safety.tempdir import private_tempdir
from kvbudget.workload.request import PlannedRequest

REQUESTS_FILE = "requests.jsonl"
METRICS_FILE = "metrics.jsonl"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"


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


def read_api_key(cfg: RunConfig) -> str | None:
    """The API key from the environment variable named in the config (never stored)."""
    return secret_from_env(cfg.api_key_env, flag="--api-key-env")


def served_model(cfg: RunConfig, ident: dict[str, Any]) -> str:
    """:func:`check_served_model` for a load run."""
    return check_served_model(
        cfg.base_url, cfg.model, ident, connect_timeout_s=cfg.connect_timeout_s
    )


def check_served_model(
    base_url: str, model: str | None, ident: dict[str, Any], *, connect_timeout_s: float = 10.0
) -> str:
    """The model name to send, checked against ``GET /v1/models`` before any request.

    ``ident`` is :func:`~kvbudget.load.identity.server_identity`'s answer. An empty ``model``
    takes the first served model (as ``vllm bench serve`` does). A name the server does not
    serve, an unreachable server or a ``/v1/models`` that is not an OpenAI model list stops
    the run here, in one line, with nothing sent.
    """
    url = route_url(base_url, "/v1/models")
    status = ident.get("models_status")
    if status == 0:
        raise TargetError(
            f"--base-url: cannot reach {url} (connection refused, or no answer within "
            f"{connect_timeout_s:g} s); check --base-url and that the server is up"
        )
    if status != 200:
        hint = (
            "give the key's variable with --api-key-env"
            if status in (401, 403)
            else "check --base-url: the server root, e.g. http://127.0.0.1:8000 (or its /v1)"
        )
        said = ident.get("models_error") or ""
        raise TargetError(
            f"GET {url} answered HTTP {status}" + (f" ({said})" if said else "") + f"; {hint}"
        )
    ids: list[str] = list(ident.get("model_ids") or [])
    if not ids:
        raise TargetError(
            f"GET {url} lists no models; is this an OpenAI-compatible server? check --base-url"
        )
    if not model:
        return ids[0]
    if model not in ids:
        shown = ", ".join(ids[:8]) + (f" (+{len(ids) - 8} more)" if len(ids) > 8 else "")
        raise TargetError(
            f"--model {model}: {base_url} does not serve it; it serves {shown}; give "
            "one of those (or leave --model out for the first); nothing was sent"
        )
    return model


def unique_records(records: Sequence[RequestRecord]) -> tuple[list[RequestRecord], int]:
    """The first record of each request id, and how many later duplicates were dropped."""
    seen: set[str] = set()
    kept: list[RequestRecord] = []
    for rec in records:
        if rec.request_id in seen:
            continue
        seen.add(rec.request_id)
        kept.append(rec)
    return kept, len(records) - len(kept)


def _prepare_dir(cfg: RunConfig, out_dir: Path, resume: bool) -> tuple[int, set[str]]:
    """Check/record run.json; return (segment, ids already recorded)."""
    run_file = out_dir / RUN_FILE
    req_file = out_dir / REQUESTS_FILE
    if resume:
        if not run_file.exists():
            raise ConfigError(
                f"--resume: {run_file} does not exist; there is no run to continue in "
                f"{out_dir} (start one without --resume)",
                field="resume",
            )
        try:
            old = RunConfig.model_validate(
                json.loads(run_file.read_text(encoding="utf-8"))["config"]
            )
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            raise ConfigError(
                f"--resume: {run_file} is not a run file kvbudget wrote (unreadable, not JSON or "
                "no valid 'config'); start over without --resume or choose another --out",
                field="resume",
            ) from None
        diff = cfg.same_run(old)
        if diff:
            raise ConfigError(
                f"--resume: the options differ from the recorded run in {out_dir} on "
                f"{', '.join(diff)}; resume with the same options",
                field="resume",
            )
        _same_files(cfg, old, out_dir)
        if old.duration_s is not None and old.num_requests is None:
            raise ConfigError(
                "--resume needs a run with --num-requests (a duration-only run has no fixed "
                "set of requests to complete)",
                field="resume",
            )
        done = read_jsonl(req_file, RequestRecord).items
        segment = 1 + max((r.run_segment for r in done), default=-1)
        return segment, {r.request_id for r in done}
    if req_file.exists() and req_file.stat().st_size > 0:
        raise ConfigError(
            f"--out {out_dir} already holds a run ({req_file}); use --resume to continue it "
            "or choose another --out",
            field="out",
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    # stored without URL credentials or registered secrets; --resume compares the
    # redacted spellings (RunConfig.same_run)
    config = cfg.model_dump(mode="json")
    run_file.write_text(
        redact_text(json.dumps({"config": config, "created_unix_s": time.time()}, indent=2))
    )
    return 0, set()


#: the input files a run hashes when it starts and ``--resume`` re-reads: (path field, hash
#: field, flag) of :class:`~kvbudget.load.config.BenchWorkload`
HASHED_FILES = (
    ("dataset_path", "dataset_sha256", "--dataset-path"),
    ("trace_path", "trace_sha256", "--trace"),
)


def _with_file_hashes(cfg: RunConfig) -> RunConfig:
    """``cfg`` with the sha256 of each input file's bytes as the run starts (run.json keeps them;
    ``--resume`` checks them: :func:`_same_files`)."""
    w = cfg.workload
    update: dict[str, str] = {}
    for path_field, sha_field, flag in HASHED_FILES:
        path = getattr(w, path_field)
        if path is not None and (path_field != "dataset_path" or w.dataset):
            update[sha_field] = dataset_sha256(path, flag, path_field)
    if not update:
        return cfg
    return cfg.model_copy(update={"workload": w.model_copy(update=update)})


def _same_files(cfg: RunConfig, old: RunConfig, out_dir: Path) -> None:
    """Refuse a resume whose dataset or trace file is not the one the run started with."""
    for path_field, sha_field, flag in HASHED_FILES:
        was, now = getattr(old.workload, sha_field), getattr(cfg.workload, sha_field)
        if was == now:
            continue
        path = getattr(cfg.workload, path_field)
        if was is None:
            raise ConfigError(
                f"--resume: the run in {out_dir} recorded no {sha_field} for {flag} "
                f"{path} (started by an older kvbudget), so the file cannot be checked; start a "
                "new run with another --out",
                field=path_field,
            )
        raise ConfigError(
            f"--resume: {flag} {path} is not the file the run in {out_dir} started with "
            f"({sha_field} {was} recorded, {now} now); put the original file back, or start a "
            "new run with another --out",
            field=path_field,
        )


async def run_load(
    cfg: RunConfig,
    *,
    out_dir: Path | None = None,
    planned: Sequence[PlannedRequest] | None = None,
    resume: bool = False,
    progress: ProgressFn | None = None,
    progress_lines: Callable[[int], None] | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    stop_when: StopWhen | None = None,
) -> BenchDocument:
    """Run the load described by ``cfg`` and return its result document.

    ``use_ray``: the workers are Ray actors (:mod:`kvbudget.load.ray_workers`), on the local
    Ray or the cluster at ``ray_address``.
    ``stop_when``: judged on each finished (non-warm-up) record, in this process; the first
    reason it returns stops the run early (nothing more is sent, requests in flight are
    recorded as cancelled; :mod:`kvbudget.load.runner`), and ``accounting.stopped_early`` says
    why. Only with one in-process worker (the judge sees every record).
    """
    if stop_when is not None and (use_ray or cfg.workers > 1):
        raise ValueError("stop_when needs one in-process worker (workers=1, no Ray)")
    api_key = read_api_key(cfg)
    if out_dir is not None:
        lock_out_dir(out_dir)  # one run per directory: a second one refuses in one line
        return await _run_in(
            cfg,
            out_dir,
            planned,
            resume,
            progress,
            progress_lines,
            api_key,
            use_ray,
            ray_address,
            stop_when,
        )
    # removed on every exit path, SIGKILL included (a reaper process watches this one)
    with private_tempdir("kvbudget-bench-") as tmp:
        lock_out_dir(tmp)
        try:
            return await _run_in(
                cfg,
                tmp,
                planned,
                resume,
                progress,
                progress_lines,
                api_key,
                use_ray,
                ray_address,
                stop_when,
            )
        finally:
            release_out_dir(tmp)


async def _run_in(
    cfg: RunConfig,
    out_dir: Path,
    planned: Sequence[PlannedRequest] | None,
    resume: bool,
    progress: ProgressFn | None,
    progress_lines: Callable[[int], None] | None,
    api_key: str | None,
    use_ray: bool = False,
    ray_address: str | None = None,
    stop_when: StopWhen | None = None,
) -> BenchDocument:
    async with OpenAIClient(
        cfg.base_url, concurrency=2, timeout_s=cfg.timeout_s, api_key=api_key
    ) as probe:
        ident = await server_identity(probe)
    own_sim = ident.get("engine") == "kvbudget-serve"
    cfg = cfg.model_copy(
        update={
            "model": served_model(cfg, ident),
            "record_source": "simulated" if own_sim else "measured",
        }
    )
    if planned is None:
        # the files' content as the run starts: recorded in run.json, checked by --resume
        cfg = _with_file_hashes(cfg)
    segment, skip = _prepare_dir(cfg, out_dir, resume)
    async with OpenAIClient(
        cfg.base_url, concurrency=2, timeout_s=cfg.timeout_s, api_key=api_key
    ) as probe:
        # only once the server answered: an unreachable one costs no prompt generation
        dataset_info: dict[str, Any] | None = None
        if planned is None and cfg.workload.dataset:
            planned, dataset_info = await _dataset(cfg, probe, ident)
        elif planned is None and cfg.workload.trace_path is not None:
            planned = plan_trace(cfg)
        elif planned is None and cfg.workload.planned:
            planned = plan_synthetic(cfg)
        elif planned is None and cfg.open_loop:
            planned = planned_open_loop(cfg)
        elif planned is None and cfg.num_requests is not None:
            # generated before the clock starts, so prompt generation is not on the hot path
            planned = [synthetic_request(cfg, i) for i in range(cfg.num_requests)]
        report = await read_engine_report(probe, cfg.metrics_url)
        if dataset_info is None:
            planned, prompts_info = await _served_lengths(cfg, probe, ident, planned)
        else:
            prompts_info = dataset_info  # sent as written: never rebuilt to a length
    ident = {**ident, "engine_report": report.model_dump(mode="json", exclude_none=True)}
    ident["prompts"] = prompts_info
    num_workers = cfg.workers if cfg.open_loop else min(cfg.workers, cfg.concurrency)
    req_path = out_dir / REQUESTS_FILE
    pool: Any = None
    if use_ray:
        from kvbudget.load.ray_workers import RayWorkerPool

        pool = RayWorkerPool(
            cfg, planned, num_workers, segment, skip, req_path, api_key, ray_address=ray_address
        )
        await pool.start()  # actors up and their clock offsets estimated
    elif num_workers > 1:
        pool = WorkerPool(cfg, planned, num_workers, segment, skip, req_path, api_key)
        await pool.start()  # every worker imported and waiting: only now pick the start
    t0 = time.perf_counter() + cfg.baseline_s + 0.05
    if pool is not None:
        pool.go(t0)
    scraper = None
    metrics_writer = None
    if cfg.metrics_url:
        metrics_writer = JsonlWriter(out_dir / METRICS_FILE)
        scraper = MetricsScraper(
            cfg.metrics_url, interval_s=cfg.scrape_interval_s, t0=t0, writer=metrics_writer
        )
        await scraper.baseline(max(0.0, t0 - time.perf_counter() - 0.01))
    stop = asyncio.Event()
    scrape_task = asyncio.create_task(scraper.run(stop)) if scraper is not None else None
    try:
        if pool is None:
            with JsonlWriter(req_path) as writer:
                results = [
                    await run_worker(
                        cfg,
                        writer=writer,
                        t0=t0,
                        segment=segment,
                        planned=planned,
                        skip_ids=skip,
                        api_key=api_key,
                        progress=progress,
                        stop_when=stop_when,
                    )
                ]
        else:
            results = await pool.collect(progress_lines)
    finally:
        if pool is not None:
            pool.terminate()
        stop.set()
        if scrape_task is not None:
            await scrape_task
        if scraper is not None and req_path.exists():
            # the engine counts a request after answering it: scrape until it has counted all
            done = read_jsonl(req_path, RequestRecord).items
            await scraper.settle(sum(r.run_segment == segment and r.status == "ok" for r in done))
        if metrics_writer is not None:
            metrics_writer.close()
    ray_accounting = pool.accounting() if use_ray else None
    return _finish(cfg, out_dir, ident, results, scraper, segment, ray_accounting)


async def _dataset(
    cfg: RunConfig, client: OpenAIClient, ident: dict[str, Any]
) -> tuple[list[PlannedRequest], dict[str, Any]]:
    """A dataset's requests, counted with the served tokenizer as vllm bench serve counts them."""
    from kvbudget.load.served_prompts import num_special_tokens

    models = ident.get("models") or [{}]
    root = models[0].get("root") if isinstance(models[0], dict) else None
    tok = await resolve_tokenizer(client, cfg.model, cfg.tokenizer, root, ident.get("engine"))
    special = 0 if tok is None else await num_special_tokens(tok, client, cfg.model)
    planned, info = await plan_dataset(cfg, tok, special)
    return planned, {"tokenizer": "synthetic" if tok is None else tok.source, **info}


async def _served_lengths(
    cfg: RunConfig,
    client: OpenAIClient,
    ident: dict[str, Any],
    planned: Sequence[PlannedRequest] | None,
) -> tuple[Sequence[PlannedRequest] | None, dict[str, Any]]:
    """Rewrite prompts to their length in the served model's tokenizer (see served_prompts)."""
    models = ident.get("models") or [{}]
    root = models[0].get("root") if isinstance(models[0], dict) else None
    tok = await resolve_tokenizer(client, cfg.model, cfg.tokenizer, root, ident.get("engine"))
    if tok is None or not planned:
        return planned, {"tokenizer": "synthetic" if tok is None else tok.source}
    rewritten, build = await served_prompts(
        list(planned),
        tok,
        client=client,
        model=cfg.model,
        seed=cfg.seed,
        continued_turns=cfg.workload.multi_turn,
    )
    return rewritten, {
        "tokenizer": build.tokenizer,
        "num_special_tokens": build.num_special_tokens,
        "requested_tokens_total": build.requested_tokens_total,
        "built_tokens_total": build.built_tokens_total,
        "num_mismatched": build.num_mismatched,
    }


def _finish(
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
    own_sim = engine == "kvbudget-serve"
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
