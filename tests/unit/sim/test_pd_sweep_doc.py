"""docs/disaggregation.md's sweep table is generated from bench/results/pd_sweep.json."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_doc_table_is_the_rendering_of_the_stored_result() -> None:
    spec = importlib.util.spec_from_file_location("pd_sweep", ROOT / "bench" / "pd_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = json.loads((ROOT / "bench" / "results" / "pd_sweep.json").read_text())
    assert doc["figures"] == "simulated"
    text = (ROOT / "docs" / "disaggregation.md").read_text()
    table = text.split(module.BEGIN, 1)[1].split(module.END, 1)[0].strip()
    assert table == module.render(doc).strip()
    assert len(doc["rows"]) == len(module.PROMPTS) * len(module.RATES) * len(module.LINKS)
