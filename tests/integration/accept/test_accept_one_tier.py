"""A plan may declare one, two or three input tiers (issue 31): a one-tier plan runs against the
simulator target, and its verdict is judged on the declared cells alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvbudget.cli.main import main
from tests.integration.accept.conftest import small_plan_data


@pytest.mark.timeout(300)
def test_one_tier_plan_on_the_simulator(tmp_path: Path) -> None:
    data = small_plan_data()
    load = data["load"]
    load["tiers"] = {"short": load["tiers"]["short"]}
    load["samples"] = [s for s in load["samples"] if s["tier"] == "short"]
    load["max_requests_per_cell"] = 24
    load["cancel_fraction"] = 0.0
    data["comparisons"] = []
    # a p50 ceiling needs 20 samples (10 / (1 - 0.5)); 24 requests per cell give them, and a
    # 128-256 token prompt on a simulated H100 answers far inside 5 s (every cell can pass)
    data["stop"] = {"ttft_s": {"p50": 5.0}, "tpot_s": {"p50": 1.0}, "error_rate_max": 0.5}
    data["audits"] = {"isolation": False, "reuse": False}
    plan = tmp_path / "one.yaml"
    plan.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as env, pytest.raises(SystemExit) as info:
        env.setenv("KVBUDGET_TIMING_MODEL", "roofline")
        main(["accept", str(plan), "--out", str(out), "--quiet"])
    assert info.value.code == 0
    doc = json.loads((out / "report.json").read_text())
    assert [c["cell_id"] for c in doc["cells"]] == ["short/single", "short/normal", "short/peak"]
    assert [c["verdict"] for c in doc["cells"]] == ["pass"] * 3
    assert [r["input_tier"] for r in doc["rows"]] == ["short"]
    # medium and long were not declared: not run, and no reason of the verdict names them
    assert doc["verdict"] == "untested"  # a simulated target never passes
    verdict_text = " ".join(doc["verdict_reasons"])
    assert "cells are not 'pass'" not in verdict_text
    assert "medium" not in verdict_text and "long" not in verdict_text
    assert "## Verdicts (3 cells)" in (out / "report.md").read_text()
