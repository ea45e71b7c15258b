"""``kvbudget bench``: measure an OpenAI-compatible engine under a load shape."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from kvbudget.cli.bench_config import parse_ramp, run_config, vllm_names
from kvbudget.cli.bench_render import bench_json, render_bench
from kvbudget.cli.bench_workload import WORKLOAD_KEYS, trace_shape, workload_options
from kvbudget.cli.main import run_async
from kvbudget.cli.vocab import (
    COUNT,
    COUNT0,
    ENDPOINT,
    INPUT_TOKENS,
    METRIC_PERCENTILES,
    METRIC_PERCENTILES_HELP,
    NUM_REQUESTS,
    OUTPUT_TOKENS,
    RATE,
)
from kvbudget.errors import ConfigError


@click.command("bench")
@click.option(
    "--base-url",
    required=True,
    help="Server URL, e.g. http://127.0.0.1:8000 or http://127.0.0.1:8000/v1 (both mean the same).",
)
@click.option(
    "--model",
    default=None,
    help="Model name (default: the first of GET /v1/models); checked against /v1/models "
    "before any request.",
)
@click.option(
    "--served-model-name",
    default=None,
    help="Name to put in requests when it differs from --model (as vllm bench serve).",
)
@click.option(
    "--endpoint",
    type=ENDPOINT,
    default="completions",
    show_default=True,
    help="completions (/v1/completions) or chat (/v1/chat/completions).",
)
@click.option(
    "--metrics-url",
    default=None,
    help="Prometheus endpoint to scrape during the run, e.g. http://127.0.0.1:8000/metrics.",
)
@click.option(
    "--scrape-interval",
    "scrape_interval_s",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds between scrapes.",
)
@click.option(
    "--baseline-s",
    "baseline_s",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds of idle metric scraping before the load starts.",
)
@click.option(
    "--arrival",
    "shape",
    type=click.Choice(["closed", "constant", "poisson", "gamma", "burst", "ramp"]),
    default="closed",
    show_default=True,
    help="Load shape: closed loop (--concurrency) or an open-loop arrival process.",
)
@click.option(
    "--concurrency",
    default=None,
    type=COUNT,
    help="Closed loop: requests kept in flight [default: 1].",
)
@click.option(
    "--max-concurrency",
    default=None,
    type=COUNT,
    help="vllm bench serve's cap: with --rate, the most requests in flight (--max-inflight); "
    "without it, a closed loop of this many (--concurrency).",
)
@click.option(
    *RATE,
    "rate_per_s",
    default=None,
    type=float,
    help="Open loop: requests per second offered (Poisson unless --arrival says otherwise).",
)
@click.option(
    "--gamma-cv",
    default=1.0,
    show_default=True,
    type=float,
    help="Gamma arrivals: coefficient of variation of the gaps (1 = Poisson).",
)
@click.option(
    "--ramp",
    default=None,
    help="Step ramp RATE:SECONDS,... e.g. 2:10,4:10,8:10 (Poisson within each step).",
)
@click.option(*NUM_REQUESTS, type=COUNT, default=None, help="Requests to send (count limit).")
@click.option(
    "--duration",
    "duration_s",
    type=float,
    default=None,
    help="Seconds to keep sending (time limit).",
)
@click.option(
    "--warmup-requests",
    default=0,
    show_default=True,
    type=COUNT0,
    help="First requests that are recorded but left out of the summary.",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=60.0,
    show_default=True,
    type=float,
    help="Per-request limit, seconds (a request past it is an error of kind timeout).",
)
@click.option(
    "--connect-timeout",
    "connect_timeout_s",
    default=10.0,
    show_default=True,
    type=float,
    help="TCP connect limit, seconds.",
)
@click.option(
    "--max-inflight",
    default=None,
    type=COUNT,
    help="Open loop: most requests in flight; beyond it sends wait (and the lag is reported) "
    "[default: 1024].",
)
@click.option(
    *INPUT_TOKENS,
    "--prompt-tokens",
    "prompt_tokens",
    default=32,
    show_default=True,
    type=COUNT,
    help="Prompt length in tokens of the served model's tokenizer (see --tokenizer).",
)
@click.option(
    "--tokenizer",
    default="auto",
    show_default=True,
    help="Whose tokens --input-tokens counts: auto (the served model's tokenizer: its local "
    "directory from /v1/models root, the local HF cache, else the server's /tokenize), a "
    "directory / tokenizer.json / cached hub id, or synthetic (kvbudget's word tokenizer). "
    "Never downloads.",
)
@click.option(
    *OUTPUT_TOKENS,
    "output_tokens",
    default=64,
    show_default=True,
    type=COUNT,
    help="max_tokens of each request (sent with ignore_eos).",
)
@click.option("--cache-salt", default=None, help="cache_salt to send with every request (vLLM).")
@click.option(
    "--cancel-after-tokens",
    type=COUNT,
    default=None,
    help="Cancellation injection: abort requests after this many streamed chunks.",
)
@click.option(
    "--cancel-fraction",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Fraction of requests to cancel (seeded).",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=int,
    help="Seed of prompts, arrivals and cancellations.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=COUNT,
    help="Client processes; each paces its share; one merged result.",
)
@click.option(
    "--ray",
    "use_ray",
    is_flag=True,
    help="Run the --workers as Ray actors spread over a Ray cluster's nodes (kvbudget[ray]); "
    "clock offsets corrected, one merged records file.",
)
@click.option(
    "--ray-address",
    default=None,
    help="With --ray: join this cluster (e.g. ray://HEAD:10001 or auto) [default: a local Ray].",
)
@click.option(
    "--keep-prompts",
    is_flag=True,
    help="Store prompt and output text in the records (default: sha256 only).",
)
@click.option(
    "--api-key-env",
    default=None,
    help="Name of the environment variable holding the API key (the key is never written anywhere).",
)
@click.option(
    "--check-tokens",
    type=click.Choice(["none", "server", "local"]),
    default="none",
    show_default=True,
    help="Check usage token counts against the server's /tokenize or the local synthetic tokenizer.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for run.json, requests.jsonl, metrics.jsonl and summary.json.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the run in --out: send only the requests not yet recorded (with the same "
    "options; a --dataset-path or --trace file must hash as it did when the run started).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the result as JSON on stdout (no progress bar)."
)
@click.option(
    "--max-error-fraction",
    type=click.FloatRange(0, 1),
    default=None,
    help="Exit 4 when more than this fraction of the requests failed [default: only when all did].",
)
@click.option("--no-progress", is_flag=True, help="No live progress bar.")
@click.option(METRIC_PERCENTILES, "metric_percentiles", help=METRIC_PERCENTILES_HELP)
@click.option(
    "--goodput",
    multiple=True,
    help="vllm bench serve's goodput SLOs, KEY:MILLISECONDS comma- or space-separated (keys "
    "ttft, tpot, e2el), e.g. ttft:1000,tpot:50: the requests meeting every one, as a count, "
    "a fraction and requests/s.",
)
@workload_options
def bench(**opts: Any) -> None:
    """Measure an OpenAI-compatible server (vLLM, SGLang, llama.cpp, kvbudget serve ...).

    Streams every request, times each SSE event at its first byte, and records one JSONL line
    per request the moment it ends (a killed run keeps them; --resume continues it). Reports
    TTFT, TPOT, ITL, E2E, throughput, errors by kind (connect, timeout, http_status, oom,
    broken_stream, truncated_stream, cancelled) and, with --metrics-url, the engine's own
    KV-cache, prefix-cache and queue metrics on the same timeline.
    """
    from kvbudget.load.run import run_load

    out_dir: Path | None = opts.pop("out_dir")
    resume: bool = opts.pop("resume")
    as_json: bool = opts.pop("as_json")
    no_progress: bool = opts.pop("no_progress")
    max_error_fraction: float | None = opts.pop("max_error_fraction")
    use_ray: bool = opts.pop("use_ray")
    ray_address: str | None = opts.pop("ray_address")
    if ray_address is not None and not use_ray:
        raise ConfigError("--ray-address needs --ray (workers on Ray)", field="ray_address")
    if use_ray:
        from kvbudget.ray_support import import_ray

        import_ray("kvbudget bench --ray")
    if resume and out_dir is None:
        raise ConfigError("--resume needs --out DIR (the run to continue)", field="resume")
    opts["ramp_stages"] = parse_ramp(opts.pop("ramp"))
    chosen = opts.pop("metric_percentiles")
    if chosen is not None:
        from kvbudget.metrics.percentile_set import parse_metric_percentiles

        opts["metric_percentiles"] = parse_metric_percentiles(chosen)
    from kvbudget.load.goodput import parse_goodput

    opts["goodput"] = parse_goodput(opts.pop("goodput"))
    opts["workload"] = {key: opts.pop(key) for key in WORKLOAD_KEYS}
    ctx = click.get_current_context()
    if opts["workload"]["trace_path"] is not None:
        trace_shape(opts, ctx)
    vllm_names(opts, ctx)
    cfg = run_config(opts)
    from kvbudget.load.workloads import check_workload

    check_workload(cfg)
    if resume and cfg.workload.multi_turn:
        raise ConfigError(
            "--resume with --num-turns: a session's later turns are built on answers of the "
            "run that stopped; start a new run",
            field="resume",
        )
    if out_dir is not None:
        from kvbudget.cli.outdir import prepare_out_dir

        prepare_out_dir(out_dir, ())  # created (or a one-line error) before any request
    show = not as_json and not no_progress and sys.stderr.isatty() and not use_ray
    if show:
        doc = _run_with_progress(cfg, out_dir, resume)
    else:
        doc = run_async(
            run_load(cfg, out_dir=out_dir, resume=resume, use_ray=use_ray, ray_address=ray_address)
        )
    if as_json:
        click.echo(json.dumps(bench_json(doc), indent=2, default=str))
    else:
        render_bench(doc)
        if out_dir is not None:
            click.echo(
                f"records: {out_dir / 'requests.jsonl'}; summary: {out_dir / 'summary.json'}"
            )
    lost = doc.accounting.get("workers_lost") or 0
    if lost:
        from kvbudget.errors import TargetError

        raise TargetError(
            f"{lost} of {cfg.workers} Ray worker(s) lost mid-run; their finished records are "
            "kept" + (f" in {out_dir / 'requests.jsonl'}" if out_dir else "") + "; rerun with "
            "--resume to send the rest"
        )
    _exit_if_failed(doc, max_error_fraction)


def _exit_if_failed(doc: Any, max_error_fraction: float | None) -> None:
    """Exit 4 with one line when every request (or more than the allowed share) failed."""
    from kvbudget.errors import RunFailedError
    from kvbudget.load.diagnosis import diagnose

    line = diagnose(
        doc.failures,
        url=str(doc.server.get("endpoint_url") or doc.server.get("base_url")),
        max_error_fraction=1.0 if max_error_fraction is None else max_error_fraction,
    )
    if line is not None:
        raise RunFailedError(line)


def _run_with_progress(cfg: Any, out_dir: Path | None, resume: bool) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kvbudget.load.run import run_load

    total = cfg.num_requests
    counts = {"ok": 0, "error": 0, "cancelled": 0}
    with Progress(
        TextColumn("[bold]bench"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[detail]}"),
        transient=True,
    ) as progress:
        task = progress.add_task("bench", total=total, detail="")

        def on_record(rec: Any) -> None:
            counts[rec.status] += 1
            progress.update(
                task,
                advance=1,
                detail=f"ok {counts['ok']} err {counts['error']} cancelled {counts['cancelled']}",
            )

        def on_lines(n: int) -> None:
            progress.update(task, completed=n)

        return run_async(
            run_load(
                cfg, out_dir=out_dir, resume=resume, progress=on_record, progress_lines=on_lines
            )
        )
