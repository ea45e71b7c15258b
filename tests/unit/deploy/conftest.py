"""Builders for the deploy tests: a plan (the demo's) with lock overrides, rendered to a dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
DEMO_PLAN = REPO_ROOT / "examples" / "acceptance-demo.yaml"


def demo_plan_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEMO_PLAN.read_text(encoding="utf-8"))
    return data


@pytest.fixture
def write_plan(tmp_path: Path) -> Any:
    def write(lock: dict[str, Any] | None = None, **top: Any) -> Path:
        data = demo_plan_data()
        data["lock"].update(lock or {})
        data.update(top)
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        return path

    return write


def load_dir(out: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d]
        for p in sorted(out.glob("*.yaml"))
    }


def small_plan_data(*, tpot_p95: float = 0.2, ttft_p95: float = 5.0) -> dict[str, Any]:
    """The demo plan cut to one repetition of 12 requests per cell (simulated, ~15 s)."""
    data = demo_plan_data()
    data["load"]["repetitions"] = 1
    data["load"]["max_requests_per_cell"] = 12
    data["comparisons"] = []
    data["audits"] = {"isolation": False, "reuse": False}
    data["stop"]["ttft_s"] = {"p95": ttft_p95}
    data["stop"]["tpot_s"] = {"p95": tpot_p95}
    return data


@pytest.fixture(scope="session")
def accepted_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.json of kvbudget accept on the small plan (simulated target, not a fail)."""
    from click.testing import CliRunner

    from kvbudget.cli.accept import accept

    root = tmp_path_factory.mktemp("accepted")
    plan = root / "plan.yaml"
    plan.write_text(yaml.safe_dump(small_plan_data()), encoding="utf-8")
    result = CliRunner().invoke(accept, [str(plan), "--out", str(root / "out"), "--quiet"])
    assert result.exit_code == 0, result.output
    return root / "out" / "report.json"
