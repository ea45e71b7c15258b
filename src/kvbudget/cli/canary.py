"""``kvbudget canary PLAN.yaml --baseline-report BASE/report.json --out DIR``: gate a candidate."""

from __future__ import annotations

from pathlib import Path

import click

from kvbudget.cli.vocab import COUNT


@click.command("canary")
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--baseline-report",
    "baseline_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="report.json of the accepted baseline (kvbudget accept).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports/canary"),
    show_default=True,
    help="Directory for canary.json, canary.md and the JSONL records.",
)
@click.option(
    "--cells",
    default="short/single,medium/single",
    show_default=True,
    help="Comma-separated cells to run (input/concurrency).",
)
@click.option(
    "--num-requests",
    "--num-prompts",
    "num_requests",
    type=COUNT,
    default=None,
    help="Requests per cell (one repetition; never more than the plan's max_requests_per_cell). "
    "Default: enough that the plan's cancellations still leave the 20 samples a median needs "
    "(26 at 5 % cancelled).",
)
@click.option(
    "--max-regression",
    "tolerance",
    type=click.FloatRange(min=0),
    default=0.20,
    show_default=True,
    help="Allowed TTFT/TPOT p95 regression against the baseline (0.2 = 20 %).",
)
@click.option("--drill", is_flag=True, help="Also run the plan's rollback drill (rollback.drill).")
@click.option(
    "--metrics-textfile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Add this run to kvbudget_canary_runs_total / _failures_total in a Prometheus textfile.",
)
@click.option(
    "--service",
    default=None,
    help="Service name: the textfile's service label, as kvbudget deploy --service (default: the plan name).",
)
@click.option("--keep-prompts", is_flag=True, help="Keep prompt and output text in records.jsonl.")
def canary(
    plan_file: Path,
    baseline_path: Path,
    out_dir: Path,
    cells: str,
    num_requests: int | None,
    tolerance: float,
    drill: bool,
    metrics_textfile: Path | None,
    service: str | None,
    keep_prompts: bool,
) -> None:
    """Run the short, low-concurrency cells of PLAN_FILE against its target (the candidate) and
    gate them on the plan's stop conditions and on the baseline report: TTFT/TPOT p95 within
    --max-regression of the baseline's, error rate, optionally the rollback drill. Exit status: 0
    when it passes; 1 when it fails or is untested (it could not judge the candidate, e.g. too few
    requests completed: that blocks a rollout too); 2 for bad input.
    """
    from kvbudget.accept.canary import canary_markdown, run_canary
    from kvbudget.accept.canary_metrics import read_textfile, service_name, write_textfile
    from kvbudget.accept.plan.planfile import load_plan
    from kvbudget.accept.targets.factories import factory_for
    from kvbudget.cli.main import run_async
    from kvbudget.cli.outdir import prepare_out_dir
    from kvbudget.records import write_document
    from kvbudget.report.write import load_result

    plan = load_plan(plan_file)
    baseline = load_result(baseline_path)
    wanted = [c.strip() for c in cells.split(",") if c.strip()]
    if metrics_textfile is not None:
        read_textfile(metrics_textfile)  # a file that is not its textfile is refused before the run
    prepare_out_dir(out_dir, ("canary.json", "canary.md"))
    factory = factory_for(plan, run_async=run_async, keep_prompts=keep_prompts)
    doc = run_canary(
        plan,
        factory,
        baseline,
        baseline_path=baseline_path,
        cells=wanted,
        num_requests=num_requests,
        tolerance=tolerance,
        drill=drill,
        out_dir=out_dir,
    )
    write_document(out_dir / "canary.json", doc)
    (out_dir / "canary.md").write_text(canary_markdown(doc), encoding="utf-8")
    if metrics_textfile is not None:
        write_textfile(
            metrics_textfile,
            service=service_name(service or plan.name),  # the label kvbudget deploy gives it
            verdict=doc.verdict,
        )
    click.echo(f"canary {doc.verdict}: " + "; ".join(doc.verdict_reasons[:3]))
    click.echo(f"canary json: {out_dir / 'canary.json'}")
    if doc.verdict != "pass":
        raise SystemExit(1)
