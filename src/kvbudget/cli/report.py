"""``kvbudget report RESULT.json``: re-render Markdown and HTML from a result document."""

from __future__ import annotations

from pathlib import Path

import click

from kvbudget.cli.vocab import METRIC_PERCENTILES

FACTORS = ["kv_dtype", "block_size", "prefix_caching", "max_model_len", "offload", "router_policy"]


@click.command("report")
@click.argument("result_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write report.md, report.html and a copy of report.json (default: "
    "report.md and report.html beside RESULT.json).",
)
@click.option(
    "--compare",
    "variant_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A second report.json (the variant run) to compare against RESULT.json (the baseline).",
)
@click.option(
    "--factor",
    type=click.Choice(FACTORS),
    default=None,
    help="The one lock field the variant changed (required with --compare).",
)
@click.option(
    "--percentile",
    default=95.0,
    show_default=True,
    type=click.FloatRange(0, 100, min_open=True, max_open=True),
    help="Percentile whose difference gets a bootstrap CI (with --compare).",
)
@click.option(
    "--alpha",
    default=0.05,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Family-wise error rate for the Holm-corrected tests (with --compare).",
)
@click.option(
    METRIC_PERCENTILES,
    "metric_percentiles",
    default=None,
    help="Percentiles of TTFT, TPOT, ITL and E2E per cell, comma-separated, e.g. 75,99.9 "
    "(vllm bench serve's flag): the cells are summarised again from the run's records.jsonl "
    "beside RESULT.json (p50/p90/p95/p99 always kept; verdicts as the run judged them) "
    "[default: the run's own].",
)
def report(
    result_file: Path,
    out_dir: Path | None,
    variant_file: Path | None,
    factor: str | None,
    percentile: float,
    alpha: float,
    metric_percentiles: str | None,
) -> None:
    """Re-render report.md and report.html from an acceptance report.json (no run, no load).

    With --compare VARIANT.json --factor F: add a single-factor comparison of two finished runs
    (not_comparable, with every difference listed, when the locks differ in more than F) and
    show the two runs' charts side by side in report.html; the output then goes to --out
    (default: a 'compare' folder beside RESULT.json).

    With --metric-percentiles: each cell's latency figures are summarised again, at those
    percentiles, from the records.jsonl and progress.jsonl the run wrote beside RESULT.json
    (and beside VARIANT.json), with the run's own summariser and bootstrap seed.
    """
    from kvbudget.errors import ConfigError
    from kvbudget.report.terminal import print_summary
    from kvbudget.report.write import load_result, write_report

    chosen = None
    if metric_percentiles is not None:
        from kvbudget.metrics.percentile_set import parse_metric_percentiles

        chosen = parse_metric_percentiles(metric_percentiles)  # one line, before any reading
    doc = load_result(result_file)
    if chosen is not None:
        from kvbudget.accept.resummarize import resummarize

        doc = resummarize(doc, result_file.parent, chosen)
    variant = None
    if variant_file is not None:
        from kvbudget.accept.judge.compare_results import compare_documents

        if factor is None:
            raise ConfigError("--factor: required with --compare; name the one lock field changed")
        variant = load_result(variant_file)
        if chosen is not None:
            from kvbudget.accept.resummarize import resummarize

            variant = resummarize(variant, variant_file.parent, chosen)
        comparison = compare_documents(
            doc,
            result_file,
            variant,
            variant_file,
            factor=factor,
            percentile=percentile,
            alpha=alpha,
        )
        doc = doc.model_copy(update={"comparisons": [*doc.comparisons, comparison]})
        out_dir = out_dir or result_file.parent / "compare"
    target = out_dir or result_file.parent
    from kvbudget.cli.outdir import prepare_out_dir

    prepare_out_dir(target, ())  # created, or a one-line error naming the directory
    paths = write_report(doc, target, json_too=out_dir is not None, variant=variant)
    if out_dir is None:
        paths["json"] = result_file
    print_summary(doc, paths, wall_s=None)
