"""Stop-on-capacity-error on the simulator: a long tier beyond max_model_len stops its row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.cli.main import main


def test_long_row_stops_at_the_first_capacity_error(
    tmp_path: Path, plan_data: dict[str, Any]
) -> None:
    plan_data["lock"]["max_model_len"] = 4096
    plan_data["load"]["tiers"]["long"].update(min_tokens=3000, max_tokens=6000, output_tokens=16)
    plan_data["comparisons"] = []
    plan_data["audits"] = {"isolation": False, "reuse": False}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(plan_data), encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["accept", str(plan), "--out", str(tmp_path / "out"), "--quiet"])
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    cells = {c["cell_id"]: c for c in doc["cells"]}
    single = cells["long/single"]
    assert single["verdict"] == "fail"
    assert "exceed max_model_len 4096" in single["reasons"][0]
    assert single["num_error"] > 0 and single["repetitions"] == 1  # no retry after the error
    for later in ("long/normal", "long/peak"):
        assert cells[later]["verdict"] == "untested"
        assert cells[later]["num_requests"] == 0
        assert "capacity error at concurrency 'single'" in cells[later]["reasons"][0]
        assert "last passing tier kept: none" in cells[later]["reasons"][0]
    rows = {r["input_tier"]: r for r in doc["rows"]}
    assert rows["long"]["last_passing"] is None and rows["long"]["stopped_at"] == "single"
    assert rows["long"]["capacity_error"] is True
    assert "capacity error at 1 concurrent (single)" in (tmp_path / "out" / "report.md").read_text()
    stops = {s["name"]: s for s in doc["stop_conditions"]}
    assert stops["capacity error"]["status"] == "triggered"
    assert doc["verdict"] == "fail"
    # the other rows ran in full
    assert all(cells[f"short/{c}"]["num_requests"] > 0 for c in ("single", "normal", "peak"))
