"""``kvbudget report --metric-percentiles``: an accept run's cells summarised again, at the chosen
percentiles, from the records.jsonl the run wrote (issue 31, "Percentiles and workloads").

Expected percentiles are worked from the raw records with numpy's default (linear)
definition written out here: for n sorted values the q-th percentile sits at rank
``(n - 1) q / 100`` between the two neighbouring values (``vllm bench serve``'s
``np.percentile``). Re-summarising at the run's own percentiles must give back the run's own
figures, CIs included (the same summariser and bootstrap generator).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.cli.main import main
from kvbudget.records import RequestRecord, read_jsonl
from tests.fuzz.test_files import _small_plan


def _linear(values: list[float], q: float) -> float:
    xs = sorted(values)
    rank = (len(xs) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("accept")
    plan = _small_plan()
    plan["load"]["repetitions"] = 2  # two repetitions per cell: both are pooled
    path = tmp / "plan.yaml"
    path.write_text(yaml.safe_dump(plan), encoding="utf-8")
    out = tmp / "out"
    try:
        main(["accept", str(path), "--out", str(out), "--quiet"])
    except SystemExit as exc:
        assert not exc.code
    return out


def _report(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    dest = tmp_path / "r"
    code, err = _cli(["report", str(run_dir / "report.json"), "--out", str(dest), *extra], capsys)
    assert code == 0, err
    return json.loads((dest / "report.json").read_text()), dest


def test_the_runs_own_percentiles_give_back_the_runs_figures(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = json.loads((run_dir / "report.json").read_text())
    again, _ = _report(run_dir, tmp_path, capsys, "--metric-percentiles", "50,90,95,99")
    assert any(c["summaries"] for c in original["cells"])
    assert [c["summaries"] for c in again["cells"]] == [c["summaries"] for c in original["cells"]]
    assert again["metric_percentiles"] == original["metric_percentiles"]


def test_chosen_percentiles_are_worked_from_the_records(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = json.loads((run_dir / "report.json").read_text())
    doc, dest = _report(run_dir, tmp_path, capsys, "--metric-percentiles", "75,99.9")
    assert doc["metric_percentiles"] == [50.0, 75.0, 99.0, 99.9]
    records = read_jsonl(run_dir / "records.jsonl", RequestRecord).items
    checked = 0
    for cell, before in zip(doc["cells"], original["cells"], strict=True):
        ttft = [
            r.ttft_s
            for r in records
            if r.cell_id == cell["cell_id"]
            and not r.warmup
            and r.status == "ok"
            and r.ttft_s is not None
        ]
        # verdicts and checks are the run's
        assert cell["verdict"] == before["verdict"] and cell["checks"] == before["checks"]
        if not ttft:
            continue
        got = cell["summaries"]["ttft_s"]
        assert got["n"] == len(ttft)
        assert got["mean"] == pytest.approx(sum(ttft) / len(ttft))
        assert got["percentiles"]["p75"]["value"] == pytest.approx(_linear(ttft, 75))
        assert got["percentiles"]["p99.9"]["value"] == pytest.approx(_linear(ttft, 99.9))
        # the stop conditions' percentiles stay, as the run computed them (CIs included)
        assert got["percentiles"]["p95"] == before["summaries"]["ttft_s"]["percentiles"]["p95"]
        checked += 1
    assert checked
    assert (
        "| mean | median (p50) [95% CI] | p75 | p99 | p99.9 |" in (dest / "report.md").read_text()
    )
    assert "<th>p99.9</th>" in (dest / "report.html").read_text()
    # the run's own files are untouched
    assert json.loads((run_dir / "report.json").read_text()) == original


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_without_the_records_it_is_one_line(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(run_dir / "report.json", alone / "report.json")
    code, err = _cli(["report", str(alone / "report.json"), "--metric-percentiles", "75"], capsys)
    line = _one_line(err)
    assert code == 2
    assert line == (
        f"ConfigError: --metric-percentiles: {alone / 'records.jsonl'} does not exist; "
        "re-summarising needs the run's records beside report.json; re-render from the run's "
        "own OUT directory, or leave --metric-percentiles out"
    )
    assert not (alone / "report.md").exists()


def test_records_of_another_plan_or_run_are_refused(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    run_file = copy / "accept-run.json"
    recorded = json.loads(run_file.read_text())
    run_file.write_text(json.dumps({**recorded, "plan_sha256": "0" * 64}))
    code, err = _cli(["report", str(copy / "report.json"), "--metric-percentiles", "75"], capsys)
    assert code == 2 and "are from another plan (plan_sha256 000000000000" in _one_line(err)

    run_file.write_text(json.dumps(recorded))
    lines = (copy / "records.jsonl").read_text().splitlines(keepends=True)
    dropped = next(i for i, x in enumerate(lines) if '"warmup":false' in x.replace(" ", ""))
    cell = json.loads(lines[dropped])["cell_id"]
    (copy / "records.jsonl").write_text("".join(lines[:dropped] + lines[dropped + 1 :]))
    code, err = _cli(["report", str(copy / "report.json"), "--metric-percentiles", "75"], capsys)
    line = _one_line(err)
    assert code == 2 and f"cell {cell} has " in line and "another run's records?" in line


def test_a_bad_value_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(
        ["report", str(tmp_path / "report.json"), "--metric-percentiles", "95,abc"], capsys
    )
    assert code == 2
    assert _one_line(err) == (
        "ConfigError: --metric-percentiles '95,abc': 'abc' is not a percentile between 0 "
        'and 100 (exclusive); give comma-separated numbers, e.g. "50,90,95,99"'
    )
