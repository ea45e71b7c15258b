"""docs/accuracy.md's tables are what scripts/render_accuracy.py makes of bench/results/ (no
figure typed by hand)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.repo_scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def _renderer() -> ModuleType:
    return load_script("scripts/render_accuracy.py")


def test_accuracy_tables_match_their_raw_files() -> None:
    render = _renderer()
    text = (REPO / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert render.render(text) == text, "run: python scripts/render_accuracy.py"


def test_quantiles_by_hand() -> None:
    render = _renderer()
    # 5 values: the median is the 3rd; p90 sits 0.6 of the way from the 4th to the 5th
    assert render._quantile([0.1, 0.2, 0.3, 0.4, 1.4], 0.5) == 0.3
    assert abs(render._quantile([0.1, 0.2, 0.3, 0.4, 1.4], 0.9) - 1.0) < 1e-12
