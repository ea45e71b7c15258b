"""Comparing two finished runs: valid only when the locks differ in the declared factor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.cli.main import main


def run(tmp: Path, name: str, lock_update: dict[str, Any], base_data: dict[str, Any]) -> Path:
    data = json.loads(json.dumps(base_data))
    data["comparisons"] = []
    data["audits"] = {"isolation": False, "reuse": False}
    data["lock"].update(lock_update)
    plan = tmp / f"{name}.yaml"
    plan.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp / name
    with pytest.raises(SystemExit) as info:
        main(["accept", str(plan), "--out", str(out), "--quiet"])
    assert info.value.code == 0
    return out / "report.json"


def compare(base: Path, variant: Path, factor: str, out: Path) -> dict[str, Any]:
    with pytest.raises(SystemExit) as info:
        main(
            ["report", str(base), "--compare", str(variant), "--factor", factor, "--out", str(out)]
        )
    assert info.value.code == 0
    doc = json.loads((out / "report.json").read_text())
    comparison: dict[str, Any] = doc["comparisons"][-1]
    return comparison


def with_block_size(report: Path, block_size: int, out: Path) -> Path:
    """A copy of a finished run whose resolved lock says another block size: the comparison
    judges comparability from the two locks alone (kvbudget.accept.judge.compare_results), so a third
    full acceptance run (about a third of this test's time) would prove nothing more."""
    doc = json.loads(report.read_text())
    (entry,) = [e for e in doc["lock"] if e["field"] == "block_size"]
    entry["value"] = block_size
    if entry.get("observed") is not None:
        entry["observed"] = block_size
    out.mkdir()
    (out / "report.json").write_text(json.dumps(doc), encoding="utf-8")
    (out / "records.jsonl").write_bytes((report.parent / "records.jsonl").read_bytes())
    return out / "report.json"


@pytest.mark.slow
def test_compare_two_runs(tmp_path: Path, plan_data: dict[str, Any]) -> None:
    base = run(tmp_path, "base", {}, plan_data)
    fp8 = run(tmp_path, "fp8", {"kv_dtype": "fp8"}, plan_data)
    both = with_block_size(fp8, 32, tmp_path / "both")
    ok = compare(base, fp8, "kv_dtype", tmp_path / "c1")
    assert ok["verdict"] in ("pass", "fail", "untested")
    assert ok["differences"] == ["kv_dtype: 'bfloat16' -> 'fp8'"]  # auto resolved by the sim
    assert ok["deltas"] and ok["capacity_ratio"] == pytest.approx(2.0, rel=0.01)
    assert any("records.jsonl" in r for r in ok["reasons"])
    wrong_factor = compare(base, fp8, "block_size", tmp_path / "c2")
    assert wrong_factor["verdict"] == "not_comparable"
    two = compare(base, both, "kv_dtype", tmp_path / "c3")
    assert two["verdict"] == "not_comparable"
    assert "block_size: 16 -> 32" in two["differences"]
    assert "block_size" in two["reasons"][0]
    assert (tmp_path / "c3" / "report.html").is_file()
