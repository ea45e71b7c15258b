"""Issue 30 item 9: after a write cut short (ENOSPC stops ``os.write`` mid-line) ``accept
--resume`` repairs what it safely can and says so, and refuses in one line what it cannot:

* a torn *last* line of records.jsonl belongs to no finished repetition (records are written
  before their progress line): dropped, with a note in the report's verdict reasons;
* a stale report.json.tmp: removed, with a note;
* a damaged line before the end, or a line that is JSON but no record: refused (a finished
  repetition may have lost records), never silently skipped or crashed on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.cli.main import main
from tests.fuzz.test_files import _small_plan


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("resume")
    plan = root / "plan.yaml"
    plan.write_text(yaml.safe_dump(_small_plan()), encoding="utf-8")
    out = root / "out"
    try:
        main(["accept", str(plan), "--out", str(out), "--quiet"])
    except SystemExit as exc:
        assert not exc.code, exc.code
    return plan, out


def _resume(
    finished_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any
) -> tuple[int, str, Path]:
    plan, out = finished_run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    damage(copy)
    capsys.readouterr()
    try:
        main(["accept", str(plan), "--out", str(copy), "--resume", "--quiet"])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    lines = capsys.readouterr().err.strip().splitlines()  # plan warnings come first
    return code, lines[-1] if lines else "", copy


def test_torn_last_line_and_stale_tmp_are_repaired_and_said(
    finished_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def damage(out: Path) -> None:
        with (out / "records.jsonl").open("a", encoding="utf-8") as fh:
            fh.write('{"request_id": "short/single#0/r9", "cell_i')  # ENOSPC mid-line
        (out / "report.json.tmp").write_text('{"kind": "acc', encoding="utf-8")

    code, err, out = _resume(finished_run, tmp_path, capsys, damage)
    assert code == 0, err
    assert not (out / "report.json.tmp").exists()
    assert (out / "records.jsonl").read_bytes().endswith(b"\n")
    reasons = json.loads((out / "report.json").read_text())["verdict_reasons"]
    assert any("dropped the torn last line of records.jsonl" in r for r in reasons), reasons
    assert any("removed report.json.tmp" in r for r in reasons), reasons


def test_damaged_line_before_the_end_is_refused(
    finished_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def damage(out: Path) -> None:
        path = out / "records.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        lines[2] = lines[2][:30] + lines[3]  # a cut line, then a later write that succeeded
        path.write_text("".join(lines), encoding="utf-8")

    code, err, _ = _resume(finished_run, tmp_path, capsys, damage)
    assert code == 2
    assert err.startswith("ConfigError: --resume: ") and "records.jsonl line 3" in err


def test_a_json_line_that_is_no_record_is_refused_not_a_crash(
    finished_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def damage(out: Path) -> None:
        with (out / "progress.jsonl").open("a", encoding="utf-8") as fh:
            fh.write('{"cell_id": "short/single"}\n')

    code, err, _ = _resume(finished_run, tmp_path, capsys, damage)
    assert code == 2, err
    assert err.startswith("ConfigError: --resume: ") and "progress.jsonl" in err
    assert "Traceback" not in err and "InternalError" not in err
