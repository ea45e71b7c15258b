"""docs/benchmarks.md's tables are what scripts/render_benchmarks.py makes of bench/results/."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "render_benchmarks", REPO / "scripts" / "render_benchmarks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_the_unsupported_kv_peak_claim_is_gone() -> None:
    for name in ("benchmarks.md", "calibration.md"):
        text = (REPO / "docs" / name).read_text(encoding="utf-8")
        assert "within 1 %" not in text, name
