"""``kvbudget calibrate``: fit the simulator's step-time model to a running engine."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from kvbudget.cli.main import run_async
from kvbudget.cli.vocab import OUTPUT_TOKENS, TP
from kvbudget.errors import ConfigError


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--out {path}: cannot write ({exc.strerror})", field="out") from exc


@click.command("calibrate")
@click.option(
    "--base-url",
    required=True,
    help="Engine URL, e.g. http://127.0.0.1:8080 or http://127.0.0.1:8080/v1 (the same).",
)
@click.option("--model", required=True, help="Model name the engine serves (sent in requests).")
@click.option(
    "--metrics-url",
    default=None,
    help="Prometheus /metrics URL; its TTFT/ITL histograms are used when the engine reports no "
    "per-request timings (vLLM, SGLang).",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    required=True,
    help="Profile JSON to write (with --validate: the validation report JSON).",
)
@click.option(
    "--validate",
    is_flag=True,
    help="Calibrate on the calibration cells' ranges, then measure and predict held-out "
    "cells (peak concurrency, long inputs) and report the errors.",
)
@click.option("--name", default="", help="Profile name (default: <engine>-<model>).")
@click.option(
    "--hardware",
    default="",
    help="Hardware description to record (default: this CPU when the engine is on "
    "loopback, else 'unknown').",
)
@click.option(
    "--engine-flags",
    default="",
    help="The engine's command-line flags, recorded in the profile as given.",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, 10),
    default=3,
    show_default=True,
    help="Times the series is repeated.",
)
@click.option(
    *OUTPUT_TOKENS,
    "--decode-tokens",
    "decode_tokens",
    type=click.IntRange(4, 1024),
    default=32,
    show_default=True,
    help="Tokens generated per decode probe (and per validation request).",
)
@click.option(
    "--max-input-tokens",
    "--max-prompt-tokens",
    "max_prompt_tokens",
    type=click.IntRange(64),
    default=None,
    help="Longest prompt of the series (default: the slot context minus room for output).",
)
@click.option(
    "--max-batch",
    type=click.IntRange(1, 256),
    default=None,
    help="Largest decode batch (default: the engine's slot count).",
)
@click.option(
    "--n-batch",
    type=click.IntRange(1),
    default=None,
    help="Engine's -b (logical batch), when not the llama.cpp default 2048.",
)
@click.option(
    "--max-num-batched-tokens",
    "--n-ubatch",
    "n_ubatch",
    type=click.IntRange(1),
    default=None,
    help="Tokens one engine step computes: llama.cpp's -ub (default 512), vLLM's "
    "--max-num-batched-tokens (default: vLLM's CPU default 2048).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random prompts.")
@click.option(
    "--deadline",
    "deadline_s",
    type=click.FloatRange(1),
    default=600.0,
    show_default=True,
    help="Seconds the series may take before it is abandoned.",
)
@click.option(
    "--api-key-env",
    default=None,
    help="Name of the environment variable holding the API key (never logged).",
)
@click.option(
    "--gpu",
    default=None,
    help="GPU catalog id of a vLLM engine (kvbudget gpus): also correct the measured timing "
    "model (aiconfigurator-core) by this run and store the factors in the profile.",
)
@click.option(
    *TP,
    "tp",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Tensor-parallel size of the engine (with --gpu).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the written JSON instead of text.")
def calibrate(
    base_url: str,
    model: str,
    metrics_url: str | None,
    out_path: Path,
    validate: bool,
    name: str,
    hardware: str,
    engine_flags: str,
    repeats: int,
    decode_tokens: int,
    max_prompt_tokens: int | None,
    max_batch: int | None,
    n_batch: int | None,
    n_ubatch: int | None,
    seed: int,
    deadline_s: float,
    api_key_env: str | None,
    gpu: str | None,
    tp: int,
    as_json: bool,
) -> None:
    """Measure a short planned series on a running engine and fit the step-time model.

    Prompt lengths spread over the slot context, decode batches of several sizes, with and
    without prefix hits. Uses the engine's own per-request timings where it reports them
    (llama.cpp), its histograms with --metrics-url, the client clock otherwise. Writes a
    CalibrationProfile (fit, residuals, valid ranges, engine identity) usable with
    `kvbudget sim --timing-profile` (add `--engine llamacpp` for the slot engine). With
    --validate: also measure and predict held-out cells and report the errors.
    """
    from kvbudget.calibrate.render import profile_text, validation_text
    from kvbudget.calibrate.run import CalibrateOptions
    from kvbudget.calibrate.run import calibrate as run_calibration
    from kvbudget.calibrate.validate import validate as run_validation
    from kvbudget.safety.outlock import lock_out_file
    from kvbudget.safety.redact import secret_from_env

    lock_out_file(out_path, flag="--out")  # one calibration per output file at a time
    api_key = secret_from_env(api_key_env or None, flag="--api-key-env")
    opts = CalibrateOptions(
        base_url=base_url,
        model=model,
        metrics_url=metrics_url,
        api_key=api_key,
        name=name,
        hardware=hardware,
        engine_flags=tuple(shlex.split(engine_flags)),
        repeats=repeats,
        decode_tokens=decode_tokens,
        max_prompt_tokens=max_prompt_tokens,
        max_batch=max_batch,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        seed=seed,
        deadline_s=deadline_s,
        gpu=gpu,
        tp=tp,
    )
    if validate and gpu:
        raise ConfigError(
            "--gpu: corrects the measured model from a calibration run, not from --validate; "
            "run calibrate without --validate to store the correction",
            field="gpu",
        )
    if validate:
        report = run_async(run_validation(opts, output_tokens=decode_tokens))
        text = report.model_dump_json(indent=2)
        _write(out_path, text + "\n")
        click.echo(text if as_json else validation_text(report))
        return
    cal = run_async(run_calibration(opts))
    text = cal.profile.model_dump_json(indent=2)
    _write(out_path, text + "\n")
    if as_json:
        click.echo(text)
    else:
        click.echo(profile_text(cal.profile))
        click.echo(f"  {len(cal.observations)} points in {cal.wall_s:.1f} s; wrote {out_path}")
