"""A run killed with SIGKILL continues with --resume: no repetition is run twice."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.mark.slow
def test_sigkill_then_resume(tmp_path: Path, plan_data: dict[str, Any]) -> None:
    plan_data["load"]["repetitions"] = 2
    plan_data["load"]["max_requests_per_cell"] = 24
    plan_data["comparisons"] = []
    plan_data["audits"] = {"isolation": False, "reuse": False}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(plan_data), encoding="utf-8")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "kvbudget", "accept", str(plan), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    progress = out / "progress.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and progress.read_text().count("\n") >= 3:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=30)
    done_before = progress.read_text().count("\n")
    assert done_before >= 3
    rerun = subprocess.run(
        [*cmd, "--resume"], capture_output=True, text=True, check=False, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    lines = [json.loads(x) for x in progress.read_text().splitlines() if x.strip()]
    keys = [(x["cell_id"], x["repetition"]) for x in lines]
    assert len(keys) == len(set(keys)) == 18  # every repetition once, none repeated
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    ids = [r["request_id"] for r in records if not r["warmup"]]
    assert len(ids) == len(set(ids))  # a killed repetition's partial records were not kept twice
    doc = json.loads((out / "report.json").read_text())
    assert sum(c["num_requests"] for c in doc["cells"]) == len(ids)
    assert len(doc["cells"]) == 9
    assert all(c["repetitions"] == 2 for c in doc["cells"])
