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


def test_capacity_thresholds_come_from_the_highest_accepted_load(
    tmp_path: Path, accepted_report: Path
) -> None:
    """Issue #32 item 2: not the mean waiting of whichever cell (0.098: any queue paged), but
    the queue and the preemptions of the accepted cell that served the most requests per
    second, 20 % above it, at least one waiting request; both sustained for --alert-for."""
    report = json.loads(accepted_report.read_text())
    top = max(_ok_cells(report), key=lambda c: c["throughput"]["requests_per_s"])
    waiting = sorted(top["timeseries"]["num_waiting"])
    p95 = waiting[math.ceil(0.95 * len(waiting)) - 1]  # nearest rank, by hand
    t = top["timeseries"]["t_s"]
    rate = top["num_preemptions"] / (t[-1] - t[0])
    out = tmp_path / "out"
    CliRunner().invoke(deploy, [str(accepted_report), "--out", str(out)], catch_exceptions=False)
    rules = {
        r["alert"]: r
        for g in load_dir(out)["alerts.rules.yaml"][0]["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert rules["RequestsWaiting"]["expr"].endswith(f"> {max(1, math.ceil(p95 * 1.2)):g}")
    assert rules["KVCachePreemptions"]["expr"].endswith(f"> {rate * 1.2:g}")
    assert rules["RequestsWaiting"]["for"] == rules["KVCachePreemptions"]["for"] == "10m"
    assert top["cell_id"] in rules["RequestsWaiting"]["annotations"]["threshold"]
    # the TTFT/TPOT ceilings are checked on their own percentile (the small plan's p95)
    assert "histogram_quantile(0.95," in rules["TTFTP95High"]["expr"]
    assert "TTFTP99High" not in rules


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
