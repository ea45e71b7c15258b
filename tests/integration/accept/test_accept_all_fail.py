"""accept with an http target whose every request fails (issue 15, items 3 and 4).

The fake server answers every POST with HTTP 500 and a message chosen here; before the fix the
run ended in ``InternalError: ValueError: Data cannot be log-scaled ...`` and no report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvbudget.cli.main import main
from tests.integration.accept.test_accept_http_targets import tiny_plan
from tests.integration.http_fakes import Fake, ThreadServer

MESSAGE = "engine exploded (fake)"


@pytest.mark.slow
def test_all_failing_http_target_writes_a_report_and_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = Fake(["m"], lambda n: (500, MESSAGE))
    out = tmp_path / "out"
    with ThreadServer(fake.app) as server:
        plan = tiny_plan({"kind": "http", "base_url": server.url, "served_model": "m"}, [])
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(plan), encoding="utf-8")
        with pytest.raises(SystemExit) as info:
            main(["accept", str(path), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 4, err
    assert "InternalError" not in err and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    timed = [
        json.loads(line)
        for line in (out / "records.jsonl").read_text().splitlines()
        if not json.loads(line)["warmup"]
    ]
    assert timed and all(r["status"] == "error" and r["http_status"] == 500 for r in timed)
    expected = f"all {len(timed)} requests failed (HTTP 500 x{len(timed)})"
    assert last.startswith(f"RunFailed: {expected}"), last
    assert MESSAGE in last and server.url in last
    # the report is written and says what failed, first
    doc = json.loads((out / "report.json").read_text())
    assert doc["verdict"] == "fail"
    assert doc["verdict_reasons"][0].startswith(f"the run failed: {expected}")
    assert expected in (out / "report.md").read_text()
    assert (out / "report.html").is_file()
    # the audits against the same target are failed sections that say why (the cells stay)
    for name in ("isolation", "reuse"):
        assert doc["audits"][name]["verdict"] == "inconclusive"
        assert doc["audits"][name]["status"] == "failed"
        assert (
            "could not run" in doc["audits"][name]["reason"]
            and MESSAGE in doc["audits"][name]["reason"]
        )
