"""``kvbudget report RESULT.json``: re-render Markdown and HTML from a result document."""

from __future__ import annotations

from pathlib import Path

import click

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
def report(
    result_file: Path,
    out_dir: Path | None,
    variant_file: Path | None,
    factor: str | None,
    percentile: float,
    alpha: float,
) -> None:
    """Re-render report.md and report.html from an acceptance report.json (no run, no load).

    With --compare VARIANT.json --factor F: add a single-factor comparison of two finished runs
    (not_comparable, with every difference listed, when the locks differ in more than F) and
    show the two runs' charts side by side in report.html; the output then goes to --out
    (default: a 'compare' folder beside RESULT.json).
    """
    from kvbudget.errors import ConfigError
    from kvbudget.report.terminal import print_summary
    from kvbudget.report.write import load_result, write_report

    doc = load_result(result_file)
    variant = None
    if variant_file is not None:
        from kvbudget.accept.compare_results import compare_documents

        if factor is None:
            raise ConfigError("--factor: required with --compare; name the one lock field changed")
        variant = load_result(variant_file)
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
