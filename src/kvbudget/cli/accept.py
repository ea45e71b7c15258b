"""``kvbudget accept PLAN.yaml --out DIR``: run the nine-cell capacity acceptance."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

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
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--keep-prompts",
    is_flag=True,
    help="Keep prompt and output text in records.jsonl and show quality-checkpoint outputs "
    "(escaped) in the report (default: sha256 hashes only, no text).",
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
) -> None:
    """Run a capacity acceptance plan: idle baseline, warm-up, the nine cells (short/medium/long
    x single/normal/peak) with repetitions, single-factor comparisons, verdicts and reports.

    Targets (plan target.kind): sim (default; virtual time), serve (kvbudget serve on
    127.0.0.1, real time) and http (a real OpenAI-compatible endpoint). Simulated figures are
    labelled simulated and their quality checks untested. Exit status: 0 when the run completed (whatever the verdict;
    with --fail-on-verdict: 0 only for pass, else 1), 2 for bad input.
    """
    from kvbudget.accept.planfile import load_plan, plan_json_schema
    from kvbudget.errors import ConfigError

    if show_schema:
        click.echo(json.dumps(plan_json_schema(), indent=2))
        return
    if plan_file is None:
        raise ConfigError(
            "PLAN_FILE: missing; give a YAML plan (see examples/acceptance-demo.yaml)"
        )
    plan = load_plan(plan_file)
    from kvbudget.accept.plan_warnings import plan_warnings

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
    from kvbudget.accept.factories import factory_for
    from kvbudget.cli.outdir import prepare_out_dir
    from kvbudget.report.terminal import print_summary
    from kvbudget.report.write import write_report

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
            plan, factory, out_dir=out_dir, resume=resume, progress=progress, run_async=run_async
        )
    paths = write_report(doc, out_dir)
    print_summary(doc, paths, wall_s=time.monotonic() - started)
    if fail_on_verdict and doc.verdict != "pass":
        raise SystemExit(1)
