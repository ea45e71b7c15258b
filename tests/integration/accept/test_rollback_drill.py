"""The rollback drill restarts the baseline (``kvbudget serve``), measures time to ready and to
the first successful requests, and a failed or too-slow drill blocks the acceptance verdict."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

from kvbudget.accept.drill import run_drill
from kvbudget.accept.plan.checks import RollbackDrill
from tests.unit.deploy.conftest import small_plan_data

SERVE = [sys.executable, "-m", "kvbudget", "serve", "--model", "m", "--port", "{port}"]


def test_drill_on_kvbudget_serve_measures_ready_then_first_ok() -> None:
    started = time.monotonic()
    result = run_drill(RollbackDrill(command=SERVE, num_requests=3), model="m", max_restore_s=300)
    wall_s = time.monotonic() - started
    assert result["verdict"] == "pass", result
    assert result["kind"] == "measured"
    ready, first = result["time_to_ready_s"], result["time_to_first_ok_s"]
    # the drill's own clock sits inside this test's clock: 0 < ready <= first ok <= wall time
    assert 0 < ready <= first <= wall_s
    assert result["num_ok"] == 3
    assert result["engine_version"]  # /version answered


def test_drill_over_the_limit_fails() -> None:
    # a 2 s sleep before the server starts cannot serve within 1 s
    slow = ["/bin/sh", "-c", "sleep 2; exec " + " ".join(SERVE)]
    result = run_drill(RollbackDrill(command=slow), model="m", max_restore_s=1.0)
    assert result["verdict"] == "fail"
    assert result["time_to_first_ok_s"] is None or result["time_to_first_ok_s"] > 1.0


def test_drill_whose_baseline_exits_fails_with_its_exit_code() -> None:
    result = run_drill(RollbackDrill(command=["/bin/false"]), model="m", max_restore_s=30)
    assert result["verdict"] == "fail"
    assert "exited with code 1" in result["reason"]


def test_failed_drill_blocks_the_acceptance_verdict(tmp_path: Path) -> None:
    from kvbudget.cli.accept import accept

    data = small_plan_data()
    data["rollback"]["drill"] = {"command": ["/bin/false"]}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    result = CliRunner().invoke(accept, [str(plan), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    import json

    doc = json.loads((out / "report.json").read_text())
    assert doc["verdict"] == "fail"
    stop = next(s for s in doc["stop_conditions"] if s["name"] == "rollback drill")
    assert stop["status"] == "triggered"
    assert doc["rollback_drill"]["verdict"] == "fail"
    assert any("rollback drill" in r for r in doc["verdict_reasons"])
