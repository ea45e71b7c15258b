"""docs/benchmarks.md's tables and the sentences that read them are what
scripts/render_benchmarks.py makes of bench/results/; no figure in docs/benchmarks.md or
docs/calibration.md is typed by hand (issue 15, item 9)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from tests.repo_scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def _renderer() -> ModuleType:
    return load_script("scripts/render_benchmarks.py")


def test_every_generated_block_matches_its_raw_file() -> None:
    render = _renderer()
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    blocks = render.published(text)
    assert set(blocks) == set(render.BLOCKS), "a generated block is missing from docs/benchmarks.md"
    assert render.render(text) == text, "run: python scripts/render_benchmarks.py"


def test_calibration_tables_match_their_raw_file() -> None:
    """docs/calibration.md's vLLM predicted-vs-measured table is bench/results/vllm_calibrate.json
    as scripts/render_benchmarks.py renders it."""
    render = _renderer()
    text = (REPO / "docs" / "calibration.md").read_text(encoding="utf-8")
    assert set(render.published(text, render.CALIBRATION_BLOCKS)) == set(render.CALIBRATION_BLOCKS)
    assert render.render(text, render.CALIBRATION_BLOCKS) == text, (
        "run: python scripts/render_benchmarks.py"
    )


def test_every_table_of_figures_is_generated() -> None:
    """A markdown table with numbers outside the generated blocks is a typed-in figure (a block
    between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` is written by a bench script from
    its raw file)."""
    # (docs/calibration.md's tables hold engine constants, e.g. llama.cpp's 256-cell padding;
    # its figures are the generated block checked above)
    name = "benchmarks.md"
    text = (REPO / "docs" / name).read_text(encoding="utf-8")
    outside = re.sub(r"<!-- ([a-z_:-]+):begin -->.*?<!-- \1:end -->", "", text, flags=re.DOTALL)
    typed = [
        line for line in outside.splitlines()
        if line.lstrip().startswith("|") and re.search(r"\d", line) and not line.lstrip().startswith("|---")
    ]  # fmt: skip
    assert not typed, f"{name}: tables of figures not generated from bench/results/: {typed[:3]}"


#: a number with a unit of time, rate, size or ratio, or a bare decimal, or a load average
FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:×|x(?![\w-])|%|ms\b|µs\b|s\b|req/s|events/s|tokens/s|"
    r"points/s|qps\b|k\b|MB\b|GB\b|times\b)"
    r"|(?<![\w.])\d+\.\d+(?![\w.]*\d)"
    r"|load average[^.;)]{0,12}\d"
)
#: a figure right after one of these is a target or a bound, not a result
TARGET = re.compile(r"(≥|≤|±|<|>|under|over|within|at least|above|below|goal \()\s*$", re.I)
#: figures that are settings or worked illustrations, not results (each with why)
ALLOWED = {
    ("benchmarks.md", "0.1 s"): "the /slots sampling interval of --validate (a setting)",
    ("benchmarks.md", "15x"): "issue 18's speed goal against Vidur (a target)",
    ("calibration.md", "10 ms"): "illustrates the fit's relative weighting",
    ("calibration.md", "1 s"): "illustrates the fit's relative weighting",
    ("calibration.md", "10 %"): "worked example: 800 of 8192 cells",
    ("calibration.md", "4 x"): "an example label's slot count, quoted",
    ("calibration.md", "1 ms"): "the simulated clients' start offset (a setting)",
}


def _prose(text: str) -> str:
    """The text a reader sees as prose: generated blocks, code and link targets removed."""
    text = re.sub(r"<!-- ([a-z_:-]+):begin -->.*?<!-- \1:end -->", "", text, flags=re.DOTALL)
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def typed_figures(name: str, text: str) -> list[str]:
    prose = _prose(text)
    found = []
    for match in FIGURE.finditer(prose):
        if TARGET.search(prose[max(0, match.start() - 30) : match.start()]):
            continue
        if (name, match.group(0)) in ALLOWED:
            continue
        found.append(" ".join(prose[max(0, match.start() - 40) : match.end() + 10].split()))
    return found


def test_no_figure_in_the_prose_is_typed_by_hand() -> None:
    for name in ("benchmarks.md", "calibration.md"):
        text = (REPO / "docs" / name).read_text(encoding="utf-8")
        typed = typed_figures(name, text)
        assert not typed, (
            f"docs/{name}: figures typed by hand (generate them in scripts/render_benchmarks.py "
            f"from bench/results/, or remove them): {typed[:5]}"
        )


def test_the_detector_catches_a_typed_ratio_and_a_typed_time() -> None:
    # the check above must be able to fail: the kinds of figure this issue found typed by hand
    sample = (
        "kvbudget completed 5.5× AIPerf's requests/s; a calibration took 19-36 s; "
        "load average 5-10; short 2.92 and 2.92; −10% at 30k.\n"
        "<!-- generated:x:begin -->\n9.7× from the raw file\n<!-- generated:x:end -->\n"
    )
    typed = typed_figures("benchmarks.md", sample)
    assert len(typed) >= 6 and not any("9.7×" in t for t in typed), typed
    assert typed_figures("benchmarks.md", "at least 1.6x the target; `3.5 s` in code") == []


def test_the_unsupported_kv_peak_claim_is_gone() -> None:
    for name in ("benchmarks.md", "calibration.md"):
        text = (REPO / "docs" / name).read_text(encoding="utf-8")
        assert "within 1 %" not in text, name
