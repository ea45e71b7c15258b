"""One grid point is exactly ``kvbudget sim`` of the same scenario; a point that cannot run is
a row saying why, not a failed sweep."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from click.testing import CliRunner

from kvbudget.cli.sim import sim
from kvbudget.sweep.grid import expand, grid_from_dict
from kvbudget.sweep.point import run_point

BASE = {
    "model": "meta-llama/Llama-3.2-1B-Instruct",
    "max_model_len": 4096,
    "workload": {
        "num_requests": 60,
        "input_tokens": {"kind": "fixed", "value": 512},
        "output_tokens": {"kind": "fixed", "value": 16},
    },
}


def test_point_equals_kvbudget_sim(tmp_path: Path) -> None:
    grid = grid_from_dict({"base": BASE, "grid": {"replicas": [2], "rate_per_s": [20.0]}})
    (point,) = expand(grid)
    row = run_point(point)
    assert row["status"] == "simulated" and row["figures"] == "simulated"
    assert row["timing_model"].startswith("measured (aiconfigurator-core 0.12.0, h100_sxm")
    assert row["num_gpus"] == 2  # tp 1 x 2 replicas
    assert row["worker_pid"] == os.getpid()  # run here, in-process
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(point.scenario))
    out = CliRunner().invoke(sim, ["--scenario", str(scenario), "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert row["requests_completed"] == summary["requests_completed"] == 60
    for name in ("ttft_p99_s", "tpot_p99_s", "ttft_p50_s", "tpot_p50_s"):
        assert row[name] == summary[name], name
    assert row["output_tokens_per_s"] == summary["output_tokens_per_s"]
    assert row["timing_model"] == summary["timing_model"]
    # p50 <= p90 <= p95 <= p99
    values = [row[f"ttft_{p}_s"] for p in ("p50", "p90", "p95", "p99")]
    assert values == sorted(values)


def test_point_that_does_not_fit_is_a_row() -> None:
    data = {**BASE, "model": "meta-llama/Llama-3.1-70B", "gpu": "L4"}  # ~140 GB on 24 GB
    (point,) = expand(grid_from_dict({"base": data}))
    row = run_point(point)
    assert row["status"] == "not-run"
    assert row["reason"].startswith("CapacityError:") and "\n" not in row["reason"]
    assert row["timing_model"] is None
