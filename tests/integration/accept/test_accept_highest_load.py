"""``stop.search_highest_load: true`` on the simulator, through ``kvbudget accept``: each input
tier's row carries the searched highest concurrency, and the report says it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.cli.main import main


def test_each_tier_states_its_highest_load(tmp_path: Path, plan_data: dict[str, Any]) -> None:
    plan_data["stop"]["search_highest_load"] = True
    # the rate search needs probes of at least 20 requests to tell a growing queue
    plan_data["load"]["max_requests_per_cell"] = 24
    plan_data["comparisons"] = []
    plan_data["audits"] = {"isolation": False, "reuse": False}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(plan_data), encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["accept", str(plan), "--out", str(tmp_path / "out"), "--quiet"])
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    cap = plan_data["load"]["max_requests_per_cell"]
    for row in doc["rows"]:
        found = row["highest_load"]
        assert found["figures"] == "simulated" and found["requests_per_probe"] == cap
        assert found["slo"] == "ttft_p50<1s,ttft_p95<2s,tpot_p95<0.06s"
        probes = {p["concurrency"]: p for p in found["probes"]}
        best, failing = found["highest_concurrency"], found["failing_concurrency"]
        # the answer and the load above it were both probed: one met, the other did not
        if best is not None:
            assert probes[best]["meets"]
        if failing is not None:
            assert not probes[failing]["meets"] and found["binding_constraint"]
            assert failing == (best or 0) + 1
        else:
            assert best == cap  # nothing failed up to a closed loop of every request
        assert found["max_concurrency"] == best
        # the demo's normal tier is Poisson: the rate is searched too (stop.search_highest_load_by
        # auto); the answer and the rate above it were both probed, one met, the other did not
        rates = found["rate_probes"]
        if found["max_rate_per_s"] is not None:
            assert any(p["rate_per_s"] == found["max_rate_per_s"] and p["meets"] for p in rates)
        if found["failing_rate_per_s"] is not None:
            assert any(
                p["rate_per_s"] == found["failing_rate_per_s"] and not p["meets"] for p in rates
            )
            assert found["binding_constraint_rate"]
    text = (tmp_path / "out" / "report.md").read_text()
    assert text.count("highest load within the stop conditions (searched, simulated)") == 3
    assert text.count("req/s Poisson") + text.count("no Poisson rate found") == 3
