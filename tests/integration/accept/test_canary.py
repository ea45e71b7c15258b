"""kvbudget canary: the short single-concurrency cells against the candidate, gated on the
plan's stop conditions and on a baseline report; its textfile counters; the drill."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kvbudget.cli.accept import accept
from kvbudget.cli.canary import canary
from tests.unit.deploy.conftest import small_plan_data

SERVE = [sys.executable, "-m", "kvbudget", "serve", "--model", "m", "--port", "{port}"]


def _plan(root: Path, **rollback: Any) -> Path:
    data = small_plan_data()
    data["load"]["max_requests_per_cell"] = 20  # a median claim needs 20 samples
    data["load"]["cancel_fraction"] = 0.0  # every one of them served
    data["rollback"].update(rollback)
    path = root / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("canary-baseline")
    plan = _plan(root)
    result = CliRunner().invoke(accept, [str(plan), "--out", str(root / "base"), "--quiet"])
    assert result.exit_code == 0, result.output
    return plan, root / "base" / "report.json"


def _run(plan: Path, base: Path, out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        canary, [str(plan), "--baseline-report", str(base), "--out", str(out), *extra]
    )
    assert (out / "canary.json").is_file(), result.output
    return result.exit_code, json.loads((out / "canary.json").read_text())


def test_same_configuration_does_not_regress(tmp_path: Path, baseline: tuple[Path, Path]) -> None:
    plan, base = baseline
    code, doc = _run(plan, base, tmp_path / "c")
    assert [c["cell_id"] for c in doc["cells"]] == ["short/single", "medium/single"]
    assert all(c["num_ok"] == 20 for c in doc["cells"])
    regression = {c["name"]: c["verdict"] for c in doc["regression"]}
    # 20 samples: the median is compared (p95 would need 200)
    assert regression["short/single ttft_s vs baseline"] == "pass"
    assert regression["medium/single tpot_s vs baseline"] == "pass"
    assert doc["verdict"] != "fail" and code == 0
    assert doc["provenance"]["kind"] == "simulated"
    assert (tmp_path / "c" / "canary.md").read_text().count("vs baseline") >= 4


def test_a_regression_against_the_baseline_fails_the_canary(
    tmp_path: Path, baseline: tuple[Path, Path]
) -> None:
    plan, base = baseline
    report = json.loads(base.read_text())
    for cell in report["cells"]:  # a baseline ten times faster than the candidate can be
        for metric in ("ttft_s", "tpot_s"):
            for pct in cell["summaries"][metric]["percentiles"].values():
                pct["value"] /= 10
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps(report))
    textfile = tmp_path / "canary.prom"
    code, doc = _run(
        plan, fast, tmp_path / "c", "--metrics-textfile", str(textfile), "--service", "svc"
    )
    assert doc["verdict"] == "fail" and code == 1
    failed = [c for c in doc["regression"] if c["verdict"] == "fail"]
    assert failed and all(c["observed"] > c["limit"] for c in failed)
    assert 'kvbudget_canary_failures_total{service="svc"} 1' in textfile.read_text()
    # a second run adds to the counters
    _run(plan, fast, tmp_path / "c2", "--metrics-textfile", str(textfile), "--service", "svc")
    text = textfile.read_text()
    assert 'kvbudget_canary_runs_total{service="svc"} 2' in text
    assert 'kvbudget_canary_failures_total{service="svc"} 2' in text


def test_measured_baseline_is_not_comparable_with_a_simulated_candidate(
    tmp_path: Path, baseline: tuple[Path, Path]
) -> None:
    plan, base = baseline
    report = json.loads(base.read_text())
    report["provenance"] = {"kind": "measured", "engine": "vllm", "engine_version": "0.32.0"}
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps(report))
    _, doc = _run(plan, measured, tmp_path / "c")
    assert {c["verdict"] for c in doc["regression"]} == {"not_comparable"}
    assert doc["verdict"] != "pass"


def test_canary_runs_the_rollback_drill(tmp_path: Path, baseline: tuple[Path, Path]) -> None:
    _, base = baseline
    plan = _plan(tmp_path, drill={"command": SERVE, "served_model": "m"}, max_restore_s=300)
    code, doc = _run(plan, base, tmp_path / "c", "--drill", "--cells", "short/single")
    drill = doc["rollback_drill"]
    assert drill["verdict"] == "pass" and drill["kind"] == "measured"
    assert 0 < drill["time_to_ready_s"] <= drill["time_to_first_ok_s"] <= 300
    assert code == 0


def test_unknown_cell_is_a_one_line_error(tmp_path: Path, baseline: tuple[Path, Path]) -> None:
    plan, base = baseline
    result = CliRunner().invoke(
        canary,
        [
            str(plan),
            "--baseline-report",
            str(base),
            "--out",
            str(tmp_path),
            "--cells",
            "tiny/single",
        ],
    )
    assert result.exit_code != 0
    assert "--cells: unknown cell 'tiny/single'" in str(result.exception)


def test_a_foreign_metrics_textfile_is_refused_before_the_run(
    tmp_path: Path, baseline: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from kvbudget.cli.main import main

    plan, base = baseline
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0:root:/root:/bin/bash\n", encoding="utf-8")
    argv = ["canary", str(plan), "--baseline-report", str(base), "--out", str(tmp_path / "c"),
            "--metrics-textfile", str(victim)]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert info.value.code == 2
    assert err[-1].startswith("ConfigError: --metrics-textfile") and "root:x" not in err[-1]
    assert victim.read_text(encoding="utf-8") == "root:x:0:0:root:/root:/bin/bash\n"
    assert not (tmp_path / "c" / "canary.json").exists()  # refused before anything ran


def test_an_untested_canary_blocks_and_is_counted(
    tmp_path: Path, baseline: tuple[Path, Path]
) -> None:
    """10 requests per cell cannot give the 20 samples a median needs: nothing is judged, so the
    canary is untested, exits 1 (it must not pass a rollout silently) and counts as untested."""
    plan, base = baseline
    textfile = tmp_path / "canary.prom"
    code, doc = _run(
        plan,
        base,
        tmp_path / "c",
        "--num-requests",
        "10",
        "--metrics-textfile",
        str(textfile),
        "--service",
        "svc",
    )
    assert doc["verdict"] == "untested" and code == 1
    text = textfile.read_text()
    assert 'kvbudget_canary_untested_total{service="svc"} 1' in text
    assert 'kvbudget_canary_failures_total{service="svc"} 0' in text


def test_default_canary_of_the_demo_plan_is_judged(tmp_path: Path) -> None:
    """The demo plan cancels 5 % of requests: the default canary sends enough that a median is
    still there (26 a cell; see test_canary_size), and its p95 ceilings, which 26 samples cannot
    claim, are named as not judged rather than making the whole canary untested."""
    repo = Path(__file__).resolve().parents[3]
    demo = yaml.safe_load((repo / "examples" / "acceptance-demo.yaml").read_text())
    demo["load"]["repetitions"] = 1
    demo["load"]["max_requests_per_cell"] = 40
    demo["load"]["order"] = ["short/single", "medium/single"]
    plan = tmp_path / "demo.yaml"
    plan.write_text(yaml.safe_dump(demo))
    result = CliRunner().invoke(accept, [str(plan), "--out", str(tmp_path / "base"), "--quiet"])
    assert (tmp_path / "base" / "report.json").is_file(), result.output
    code, doc = _run(plan, tmp_path / "base" / "report.json", tmp_path / "c")
    assert doc["num_requests_per_cell"] == 26
    assert doc["verdict"] == "pass" and code == 0, doc["verdict_reasons"]
    assert any(r.startswith("not judged by the canary") for r in doc["verdict_reasons"])
