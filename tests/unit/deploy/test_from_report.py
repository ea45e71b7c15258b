"""kvbudget deploy from an accepted report.json: the accepted timings drive drain and scaling."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kvbudget.cli.deploy import deploy
from tests.unit.deploy.conftest import load_dir


def _ok_cells(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        c
        for c in report["cells"]
        if c["num_ok"] > 0
        and c["verdict"] != "fail"
        and not any(ch["verdict"] == "fail" for ch in c["checks"])
    ]


def test_drain_covers_the_accepted_p99_end_to_end(tmp_path: Path, accepted_report: Path) -> None:
    report = json.loads(accepted_report.read_text())
    assert report["verdict"] != "fail"
    cells = _ok_cells(report)
    assert cells, "the small plan must leave cells inside the accepted envelope"
    e2e_p99 = max(c["summaries"]["e2e_s"]["percentiles"]["p99"]["value"] for c in cells)
    out = tmp_path / "out"
    result = CliRunner().invoke(deploy, [str(accepted_report), "--out", str(out)])
    assert result.exit_code == 0, result.output
    pod = load_dir(out)["deployment.yaml"][0]["spec"]["template"]["spec"]
    assert (
        pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"] == math.ceil(e2e_p99) + 5
    )
    assert pod["terminationGracePeriodSeconds"] >= e2e_p99
    readme = (out / "README.md").read_text()
    assert f"Acceptance verdict: **{report['verdict']}**" in readme
    assert "simulated (timing model measured (aiconfigurator-core 0.12.0, h100_sxm" in readme


def test_waiting_threshold_is_the_accepted_queue(tmp_path: Path, accepted_report: Path) -> None:
    report = json.loads(accepted_report.read_text())
    means = [
        sum(c["timeseries"]["num_waiting"]) / len(c["timeseries"]["num_waiting"])
        for c in _ok_cells(report)
        if c["timeseries"]["num_waiting"]
    ]
    out = tmp_path / "out"
    CliRunner().invoke(deploy, [str(accepted_report), "--out", str(out)], catch_exceptions=False)
    rules = load_dir(out)["alerts.rules.yaml"][0]
    waiting = next(
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "RequestsWaiting"
    )
    assert waiting["expr"].endswith(f"> {max(means):g}")


def test_a_failed_report_is_refused_unless_allowed(tmp_path: Path, accepted_report: Path) -> None:
    report = json.loads(accepted_report.read_text())
    report["verdict"] = "fail"
    report["verdict_reasons"] = ["stop condition 'tpot_s p95' triggered"]
    # consistent with its verdict (the shared loader checks that): the stop condition triggered
    stop = next(s for s in report["stop_conditions"] if s["name"] == "tpot_s p95")
    stop.update(status="triggered", cells=["short/single"])
    failed = tmp_path / "report.json"
    failed.write_text(json.dumps(report))
    runner = CliRunner()
    refused = runner.invoke(deploy, [str(failed), "--out", str(tmp_path / "a")])
    assert refused.exit_code != 0
    assert "verdict is fail" in str(refused.exception)
    allowed = runner.invoke(deploy, [str(failed), "--out", str(tmp_path / "b"), "--allow-failed"])
    assert allowed.exit_code == 0, allowed.output
