"""docs/disaggregation.md's sweep table is generated from bench/results/pd_sweep.json."""

from __future__ import annotations

import json
from pathlib import Path

from tests.repo_scripts import load_script

ROOT = Path(__file__).resolve().parents[3]


def test_doc_table_is_the_rendering_of_the_stored_result() -> None:
    module = load_script("bench/pd_sweep.py")
    doc = json.loads((ROOT / "bench" / "results" / "pd_sweep.json").read_text())
    assert doc["figures"] == "simulated"
    text = (ROOT / "docs" / "disaggregation.md").read_text()
    table = text.split(module.BEGIN, 1)[1].split(module.END, 1)[0].strip()
    assert table == module.render(doc).strip()
    assert len(doc["rows"]) == len(module.PROMPTS) * len(module.RATES) * len(module.LINKS)
