"""accept's audits.restart: the simulated restart/upgrade section in report.json and report.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def test_restart_audit_is_a_report_section(tmp_path: Path) -> None:
    plan = yaml.safe_load((ROOT / "examples" / "acceptance-demo.yaml").read_text())
    plan["audits"] = {"restart": True}
    plan["comparisons"] = []
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget", "accept", str(path), "--out", str(out), "--quiet"],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    section = json.loads((out / "report.json").read_text())["audits"]["restart"]
    assert section["verdict"] == "pass", section
    phases = {c["phase"] for c in section["checks"]}
    assert phases == {"restart", "upgrade"}
    assert all(c["cached_tokens"] == 0 for c in section["checks"] if c["phase"] == "upgrade")
    assert "**restart**" in (out / "report.md").read_text()
