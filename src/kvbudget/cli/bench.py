"""``kvbudget bench``: measure an OpenAI-compatible engine under a load shape."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

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
    RANDOM_RANGE_RATIO,
    RATE,
)
from kvbudget.errors import ConfigError
from kvbudget.validation import first_problem

_FLAG_OF = {
    "base_url": "--base-url",
    "model": "--model",
    "shape": "--arrival",
    "concurrency": "--concurrency",
    "rate_per_s": "--rate",
    "gamma_cv": "--gamma-cv",
    "ramp_stages": "--ramp",
    "num_requests": "--num-requests",
    "prompt_tokens": "--input-tokens",
    "duration_s": "--duration",
    "timeout_s": "--timeout",
    "workload.turn_interval_s": "--turn-interval",
}

#: bench's workload options (RunConfig.workload, kvbudget.load.workloads)
WORKLOAD_KEYS = (
    "prefix_groups",
    "shared_prefix_tokens",
    "random_prefix_len",
    "random_range_ratio",
    "num_turns",
    "turn_interval_s",
    "trace_path",
    "trace_speedup",
    "trace_block_size",
    "dataset_name",
    "dataset_path",
    "sharegpt_output_len",
    "custom_output_len",
    "disable_shuffle",
)


def _parse_ramp(text: str | None) -> list[tuple[float, float]]:
    if not text:
        return []
    stages: list[tuple[float, float]] = []
    for part in text.split(","):
        try:
            rate, dur = part.split(":")
            stages.append((float(rate), float(dur)))
        except ValueError as exc:
            raise ConfigError(
                f"--ramp {text!r}: stage {part!r} is not RATE:SECONDS; write e.g. 2:10,4:10,8:10",
                field="ramp",
            ) from exc
    return stages


def _config(values: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    from kvbudget.load.config import RunConfig

    try:
        return RunConfig(**values)
    except ValidationError as exc:
        problem = first_problem(exc)
        loc = problem.where
        tail = loc.removeprefix("workload.")
        flag = _FLAG_OF.get(loc, f"--{tail.replace('_', '-')}" if loc else "options")
        given = values.get(loc) if loc else None
        if loc.startswith("workload."):
            given = values.get("workload", {}).get(tail)
        where = f"{flag}={given}: " if given is not None else (f"{flag}: " if loc else "")
        raise ConfigError(f"{where}{problem.message}", field=loc or None) from exc


def _vllm_names(opts: dict[str, Any], ctx: click.Context) -> None:
    """Resolve the load shape as ``vllm bench serve`` reads its flags.

    ``--rate`` alone is a Poisson open loop (vLLM's default); ``--max-concurrency`` caps the
    requests in flight of an open loop, or is the closed loop's concurrency without a rate;
    ``--served-model-name`` is the name put in requests.
    """
    explicit_shape = ctx.get_parameter_source("shape") is not click.core.ParameterSource.DEFAULT
    if opts["ramp_stages"] and opts["shape"] == "closed" and not explicit_shape:
        opts["shape"] = "ramp"
    if opts["rate_per_s"] is not None and opts["shape"] == "closed":
        if explicit_shape:
            raise ConfigError(
                f"--rate {opts['rate_per_s']:g}: an offered rate is open loop; drop --arrival "
                "closed (or drop --rate and give --concurrency)",
                field="rate_per_s",
            )
        opts["shape"] = "poisson"
    cap = opts.pop("max_concurrency")
    if cap is not None:
        key, flag = ("max_inflight", "--max-inflight")
        if opts["shape"] == "closed":
            key, flag = ("concurrency", "--concurrency")
        if opts[key] is not None and opts[key] != cap:
            raise ConfigError(
                f"--max-concurrency {cap} and {flag} {opts[key]}: they mean the same here; give one",
                field="max_concurrency",
            )
        opts[key] = cap
    if opts["shape"] != "closed" and opts["concurrency"] is not None:
        raise ConfigError(
            f"--concurrency {opts['concurrency']}: only for the closed loop; with --rate cap the "
            "requests in flight with --max-concurrency",
            field="concurrency",
        )
    for key in ("concurrency", "max_inflight"):
        if opts[key] is None:
            del opts[key]  # the RunConfig default
    # the name put in requests; empty: the first of GET /v1/models (checked before the load)
    opts["model"] = opts.pop("served_model_name") or opts["model"] or ""


def _trace_shape(opts: dict[str, Any], ctx: click.Context) -> None:
    """``--trace``: the trace's timestamps are the schedule (shape ``planned``)."""
    for key, flag in (
        ("shape", "--arrival"),
        ("rate_per_s", "--rate"),
        ("concurrency", "--concurrency"),
        ("ramp_stages", "--ramp"),
    ):
        source = ctx.get_parameter_source("ramp" if key == "ramp_stages" else key)
        if source is not None and source is not click.core.ParameterSource.DEFAULT:
            raise ConfigError(
                f"--trace: each request is sent at its timestamp in the trace; drop {flag}",
                field="trace",
            )
    opts["shape"] = "planned"


def bench_json(doc: Any) -> dict[str, Any]:
    """The ``--json`` document: summary fields on top, then the details."""
    out: dict[str, Any] = dict(doc.summary)
    out["server_metrics"] = {
        name: {
            k: entry.get(k)
            for k in ("samples", "min", "max", "last", "baseline", "delta", "rate_per_s")
            if k in entry
        }
        for name, entry in doc.server_metrics.items()
    }
    out["statistics"] = doc.statistics
    out["accounting"] = doc.accounting
    out["warnings"] = doc.warnings
    out["failures"] = doc.failures
    out["server"] = doc.server
    out["prompts"] = doc.prompts
    out["engine_report"] = doc.engine_report
    out["provenance"] = doc.provenance.model_dump()
    out["scrape"] = doc.scrape
    out["schema_version"] = doc.schema_version
    out["created"] = doc.created
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.2f} ms"


def _render(doc: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    s = doc.summary
    a = doc.accounting
    console = Console()
    console.print(
        f"[bold]kvbudget bench[/] — {doc.provenance.label()}  (POST "
        f"{doc.server.get('endpoint_url') or doc.server.get('base_url')}, model "
        f"{doc.server.get('model_sent')})"
    )
    if doc.provenance.note:
        console.print(f"note: {doc.provenance.note}")
    t = Table(show_header=True, header_style="bold")
    t.add_column("requests")
    t.add_column("value", justify="right")
    for key in (
        "requests_total",
        "requests_ok",
        "requests_error",
        "requests_cancelled",
        "requests_warmup",
    ):
        t.add_row(key.removeprefix("requests_"), str(s[key]))
    t.add_row("offered / sent / not sent", f"{a['offered']} / {a['sent']} / {a['not_sent']}")
    if s["errors_by_kind"]:
        t.add_row("errors by kind", ", ".join(f"{k}={v}" for k, v in s["errors_by_kind"].items()))
    console.print(t)
    for w in a.get("per_worker", []):
        console.print(
            f"ray worker {w['worker']} on {w['node']}: clock offset {w['clock_offset_s']:+.6f} s "
            f"(rtt {w['clock_rtt_s'] * 1e3:.2f} ms), sent {w['sent'] if w['sent'] is not None else '?'}"
            f" = ok {w['ok']} + error {w['error']} + cancelled {w['cancelled']}"
            + (f"  LOST: {w['lost']}" if w["lost"] else "")
        )
    from kvbudget.metrics.percentile_set import percentile_name, reported_percentiles

    names = [percentile_name(q) for q in reported_percentiles(s["metric_percentiles"])]
    lat = Table(show_header=True, header_style="bold")
    for col in ("metric", "mean", "median", *names):
        lat.add_column(col, justify="right" if col != "metric" else "left")
    for name in ("ttft", "tpot", "itl", "e2e"):
        lat.add_row(
            name,
            _ms(s.get(f"{name}_mean_s")),
            _ms(s.get(f"{name}_median_s")),
            *(_ms(s.get(f"{name}_{p}_s")) for p in names),
        )
    lat.add_row(
        "schedule_lag",
        "-",
        _ms(s.get("schedule_lag_p50_s")),
        *(_ms(s.get(f"schedule_lag_{p}_s")) for p in names),
    )
    console.print(lat)
    if "goodput_requests" in s:
        slo = ", ".join(f"{k} <= {v:g} ms" for k, v in s["goodput_slo_ms"].items())
        frac = s["goodput_fraction"]
        rate = s["goodput_requests_per_s"]
        console.print(
            f"goodput ({slo}): {s['goodput_requests']} of {s['requests_total']} requests met "
            f"every SLO ({'-' if frac is None else f'{frac:.1%}'}), "
            f"{'-' if rate is None else f'{rate:,.2f}'} requests/s"
        )
    tput = s.get("output_tokens_per_s")
    rps = s.get("requests_per_s")
    console.print(
        f"throughput: {'-' if tput is None else f'{tput:,.1f}'} output tokens/s, "
        f"{'-' if rps is None else f'{rps:,.2f}'} requests/s over {s['window_s']:.2f} s; "
        f"client CPU {a['client_cpu_s']:.2f} s"
    )
    if s.get("token_count_check"):
        console.print(f"token count check: {s['token_count_check']}")
    for name, entry in doc.server_metrics.items():
        if name.endswith("_bucket"):
            continue
        extra = f", delta {entry['delta']:g}" if "delta" in entry else ""
        console.print(
            f"server {name}: last {entry['last']:g} (min {entry['min']:g}, max {entry['max']:g}{extra})"
        )
    small = [w for w in doc.warnings if "needed; the estimate rests" in w]
    for w in doc.warnings:
        if w not in small:
            console.print(f"[yellow]warning:[/] {w}")
    if small:
        which = ", ".join(w.split(" from ")[0] for w in small)
        console.print(
            f"[yellow]warning:[/] too few samples for {which} (the q-quantile needs 10/(1-q) "
            "samples; see --json statistics for the confidence intervals)"
        )


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
@click.option(
    "--prefix-groups",
    type=COUNT0,
    default=0,
    help="sim's shared-prefix groups (Zipf popularity), each of --shared-prefix-tokens; "
    "0 = one system prompt of --shared-prefix-tokens [default: 0].",
)
@click.option(
    "--shared-prefix-tokens",
    type=COUNT0,
    default=0,
    help="sim's shared prefix (per group, or the system prompt), inside --input-tokens "
    "[default: 0].",
)
@click.option(
    "--random-prefix-len",
    type=COUNT0,
    default=0,
    help="vllm bench serve's random dataset prefix: this many tokens shared by every prompt, "
    "added before --input-tokens [default: 0].",
)
@click.option(
    RANDOM_RANGE_RATIO,
    "random_range_ratio",
    default=None,
    help="vllm bench serve's random dataset: each request's input and output length drawn "
    "uniformly within this ratio of --input-tokens / --output-tokens (0.1 = +-10 %; or "
    '\'{"input": 0.3, "output": 0.5}\') [default: 0.0, fixed].',
)
@click.option(
    "--num-turns",
    type=COUNT,
    default=1,
    show_default=True,
    help="Multi-turn sessions of this many turns: a turn is sent once the previous one "
    "finished, its prompt the previous prompt, the server's answer and a new user message of "
    "--input-tokens (sim: workload.sessions.num_turns); --num-requests counts turns.",
)
@click.option(
    "--turn-interval",
    "turn_interval_s",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Seconds between a session's planned turns (the earliest a turn is sent).",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Replay this JSONL trace at its timestamps (sim's trace format: kvbudget's export or "
    "Mooncake's; docs/workloads.md); instead of --rate/--concurrency.",
)
@click.option(
    "--trace-speedup",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Divide the trace's timestamps by this.",
)
@click.option(
    "--trace-block-size",
    type=COUNT,
    default=512,
    show_default=True,
    help="Tokens per hash id for trace lines without block_size (Mooncake: 512).",
)
@click.option(
    "--dataset-name",
    type=click.Choice(["random", "sharegpt", "custom"]),
    default="random",
    show_default=True,
    help="vllm bench serve's datasets: random (synthetic prompts of --input-tokens), sharegpt "
    '(conversations JSON/JSONL, first turn sent) or custom (JSONL of {"prompt": ...} or '
    '{"prompt_token_ids": [...]}); counted with the served tokenizer.',
)
@click.option(
    "--dataset-path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The dataset file of --dataset-name sharegpt/custom (prompts kept private: hashes only "
    "unless --keep-prompts).",
)
@click.option(
    "--sharegpt-output-len",
    type=COUNT,
    default=None,
    help="sharegpt: output tokens of every request [default: the second turn's length].",
)
@click.option(
    "--custom-output-len",
    type=COUNT,
    default=None,
    help="custom: output tokens of lines without output_tokens [default: --output-tokens].",
)
@click.option(
    "--disable-shuffle",
    is_flag=True,
    help="Send the dataset in file order (default: shuffled with --seed, as vllm bench serve).",
)
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
    opts["ramp_stages"] = _parse_ramp(opts.pop("ramp"))
    chosen = opts.pop("metric_percentiles")
    if chosen is not None:
        from kvbudget.metrics.percentile_set import parse_metric_percentiles

        opts["metric_percentiles"] = parse_metric_percentiles(chosen)
    from kvbudget.load.goodput import parse_goodput

    opts["goodput"] = parse_goodput(opts.pop("goodput"))
    opts["workload"] = {key: opts.pop(key) for key in WORKLOAD_KEYS}
    ctx = click.get_current_context()
    if opts["workload"]["trace_path"] is not None:
        _trace_shape(opts, ctx)
    _vllm_names(opts, ctx)
    cfg = _config(opts)
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
        _render(doc)
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
