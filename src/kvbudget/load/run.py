"""A whole load run: workers, metrics scraping, server identity, resume and the summary.

Files in the output directory (:mod:`kvbudget.load.run_dir`):

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
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvbudget.engine_name import KVBUDGET_SERVE
from kvbudget.load.bench_document import BenchDocument, finish_document
from kvbudget.load.client import OpenAIClient
from kvbudget.load.config import RunConfig
from kvbudget.load.datasets import plan_dataset
from kvbudget.load.engine_report import read_engine_report
from kvbudget.load.identity import server_identity
from kvbudget.load.prometheus import MetricsScraper
from kvbudget.load.requests import planned_open_loop, synthetic_request
from kvbudget.load.run_dir import METRICS_FILE, REQUESTS_FILE, prepare_run_dir, with_file_hashes
from kvbudget.load.runner import ProgressFn, StopWhen, run_worker
from kvbudget.load.served_model import read_api_key, served_model
from kvbudget.load.served_prompts import resolve_tokenizer, served_prompts
from kvbudget.load.workers import WorkerPool
from kvbudget.load.workloads import plan_synthetic, plan_trace
from kvbudget.records import JsonlWriter, RequestRecord, read_jsonl
from kvbudget.safety.outlock import lock_out_dir, release_out_dir
from kvbudget.safety.tempdir import private_tempdir
from kvbudget.workload.request import PlannedRequest


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
    own_sim = ident.get("engine") == KVBUDGET_SERVE
    cfg = cfg.model_copy(
        update={
            "model": served_model(cfg, ident),
            "record_source": "simulated" if own_sim else "measured",
        }
    )
    if planned is None:
        # the files' content as the run starts: recorded in run.json, checked by --resume
        cfg = with_file_hashes(cfg)
    segment, skip = prepare_run_dir(cfg, out_dir, resume)
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
    return finish_document(cfg, out_dir, ident, results, scraper, segment, ray_accounting)


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
