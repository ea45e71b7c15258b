"""``kvbudget accept PLAN.yaml --out DIR``: run the nine-cell capacity acceptance."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kvbudget.cli.vocab import METRIC_PERCENTILES, METRIC_PERCENTILES_HELP

if TYPE_CHECKING:
    from kvbudget.accept.result import AcceptResult

REPORT_FILES = ("report.json", "report.md", "report.html")


@click.command("accept")
@click.argument("plan_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports/accept"),
    show_default=True,
    help="Directory for report.json, report.md, report.html and the JSONL records.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue a stopped run: skip repetitions already in OUT/progress.jsonl "
    "(without it a run starts OUT's JSONL files over).",
)
@click.option(
    "--schema", "show_schema", is_flag=True, help="Print the plan file's JSON Schema and exit."
)
@click.option(
    "--validate", "validate_only", is_flag=True, help="Validate the plan file and exit (no run)."
)
@click.option("--no-progress", "--quiet", "quiet", is_flag=True, help="No live progress bar.")
@click.option(
    "--keep-prompts",
    is_flag=True,
    help="Keep prompt and output text in records.jsonl and show quality-checkpoint outputs "
    "(escaped) in the report (default: sha256 hashes only, no text).",
)
@click.option(
    METRIC_PERCENTILES,
    "metric_percentiles",
    help=METRIC_PERCENTILES_HELP
    + " Per cell in the reports; the stop conditions are judged at their own percentiles.",
)
@click.option(
    "--fail-on-verdict",
    is_flag=True,
    help="Exit 1 unless the overall verdict is pass (for CI gates).",
)
def accept(
    plan_file: Path | None,
    out_dir: Path,
    resume: bool,
    show_schema: bool,
    validate_only: bool,
    quiet: bool,
    keep_prompts: bool,
    fail_on_verdict: bool,
    metric_percentiles: str | None,
) -> None:
    """Run a capacity acceptance plan: idle baseline, warm-up, the nine cells (short/medium/long
    x single/normal/peak) with repetitions, single-factor comparisons, verdicts and reports.

    Targets (plan target.kind): sim (default; virtual time), serve (kvbudget serve on
    127.0.0.1, real time) and http (a real OpenAI-compatible endpoint). Simulated figures are
    labelled simulated and their quality checks untested. Each cell reports the mean, median
    and --metric-percentiles of TTFT, TPOT, ITL and E2E. Exit status: 0 when the run completed (whatever the verdict;
    with --fail-on-verdict: 0 only for pass, else 1), 1 when a requested audit failed (the
    report is written, its Audits section says why), 2 for bad input.
    """
    from kvbudget.accept.plan.planfile import load_plan, plan_json_schema
    from kvbudget.errors import ConfigError
    from kvbudget.metrics.percentile_set import (
        DEFAULT_METRIC_PERCENTILES,
        parse_metric_percentiles,
    )

    percentiles = (
        DEFAULT_METRIC_PERCENTILES
        if metric_percentiles is None
        else parse_metric_percentiles(metric_percentiles)
    )
    if show_schema:
        click.echo(json.dumps(plan_json_schema(), indent=2))
        return
    if plan_file is None:
        raise ConfigError(
            "PLAN_FILE: missing; give a YAML plan (see examples/acceptance-demo.yaml)"
        )
    plan = load_plan(plan_file)
    from kvbudget.accept.judge.plan_warnings import plan_warnings

    warnings = plan_warnings(plan)
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    if validate_only:
        click.echo(
            f"plan {plan_file} is valid: {plan.name} (target {plan.target.kind})"
            + (f"; {len(warnings)} warning(s) above" if warnings else "")
        )
        return

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from kvbudget.accept.acceptance import run_acceptance
    from kvbudget.accept.targets.factories import factory_for
    from kvbudget.cli.outdir import prepare_out_dir
    from kvbudget.report.terminal import print_summary

    prepare_out_dir(out_dir, REPORT_FILES)
    console = Console(stderr=True)
    started = time.monotonic()
    from kvbudget.cli.main import run_async

    factory = factory_for(plan, run_async=run_async, keep_prompts=keep_prompts)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        disable=quiet,
        transient=True,
    ) as bar:
        task = bar.add_task("accept", total=None)

        def progress(cell_id: str, step: int, total: int) -> None:
            bar.update(task, description=f"cell {cell_id}", completed=step - 1, total=total)

        doc = run_acceptance(
            plan,
            factory,
            out_dir=out_dir,
            resume=resume,
            progress=progress,
            run_async=run_async,
            metric_percentiles=percentiles,
        )
    paths = _write(doc, out_dir)
    print_summary(doc, paths, wall_s=time.monotonic() - started)
    if doc.run_failure is not None:
        from kvbudget.errors import RunFailedError

        raise RunFailedError(f"{doc.run_failure} (report: {paths['md']})")
    failed_audits = doc.audits.failed
    if failed_audits:
        click.echo(
            f"accept: the {' and '.join(failed_audits)} audit(s) failed (the report's Audits "
            "section says why; the cells are kept); exit 1",
            err=True,
        )
        raise SystemExit(1)
    if fail_on_verdict and doc.verdict != "pass":
        raise SystemExit(1)


def _write(doc: AcceptResult, out_dir: Path) -> dict[str, Path]:
    """The three reports; if rendering fails, report.json is still written (nothing is lost)."""
    from kvbudget.errors import KvbudgetError, ReportError
    from kvbudget.records import write_document
    from kvbudget.report.write import write_report

    try:
        return write_report(doc, out_dir)
    except KvbudgetError:
        raise
    except Exception as exc:
        write_document(out_dir / "report.json", doc)
        raise ReportError(
            f"report.md/report.html could not be rendered ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())}); {out_dir / 'report.json'} was written: re-render "
            "it with 'kvbudget report' after an upgrade"
        ) from exc
