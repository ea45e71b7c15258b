"""A plan's numbers are finite: YAML's .inf and .nan are refused in one line naming the field
(issue #30: "NaN and Infinity in every JSON input"; deploy refused them, accept --validate did
not)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kvbudget.cli.accept import accept

DEMO = Path(__file__).resolve().parents[3] / "examples" / "acceptance-demo.yaml"


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_ceiling_is_refused(tmp_path: Path, value: float) -> None:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["stop"]["ttft_s"] = {"p95": value}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert ".inf" in plan.read_text() or ".nan" in plan.read_text()
    result = CliRunner().invoke(accept, [str(plan), "--validate"])
    assert result.exit_code != 0
    assert "stop.ttft_s.p95" in str(result.exception) and "finite" in str(result.exception)
