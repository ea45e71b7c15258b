"""``kvbudget report RESULT.json``: re-render Markdown and HTML from a result document."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("result_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write report.md and report.html (default: beside RESULT.json).",
)
def report(result_file: Path, out_dir: Path | None) -> None:
    """Re-render report.md and report.html from an acceptance report.json (no run, no load)."""
    from kvbudget.report.terminal import print_summary
    from kvbudget.report.write import load_result, write_report

    doc = load_result(result_file)
    target = out_dir or result_file.parent
    paths = write_report(doc, target, json_too=out_dir is not None)
    if out_dir is None:
        paths["json"] = result_file
    print_summary(doc, paths, wall_s=None)
