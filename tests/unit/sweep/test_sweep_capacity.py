"""``sweep --slo``: a configuration's row is exactly ``kvbudget capacity`` of its scenario; the
cheapest configuration per target rate, and the saturation flag, worked by hand on hand-made
rows; the cheapest point is quoted at the SLO's own percentile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from kvbudget.cli.capacity import capacity
from kvbudget.sweep.capacity import capacity_row, cheapest_for_rates, configurations
from kvbudget.sweep.grid import expand, grid_from_dict
from kvbudget.sweep.point import run_point
from kvbudget.sweep.table import cheapest, cheapest_lines, derive, meets

BASE = {
    "model": "meta-llama/Llama-3.2-1B-Instruct",
    "gpu": "L4",
    "max_model_len": 4096,
    "workload": {
        "num_requests": 60,
        "input_tokens": {"kind": "fixed", "value": 512},
        "output_tokens": {"kind": "fixed", "value": 16},
    },
}
SLO = "ttft_p95<500ms,tpot_p95<50ms"


def test_points_that_differ_only_in_rate_share_one_configuration() -> None:
    points = expand(
        grid_from_dict({"base": BASE, "grid": {"replicas": [1, 2], "rate_per_s": [5, 10]}})
    )
    assert len(points) == 4
    configs = configurations(points, SLO, 100)
    assert len(configs) == 2
    assert all("rate_per_s" not in c.axes for c in configs)
    assert all("arrivals" not in c.scenario["workload"] for c in configs)
    # the key follows the SLO and the probe length (resume must not reuse another search)
    assert {c.key for c in configurations(points, "ttft_p95<1s", 100)}.isdisjoint(
        {c.key for c in configs}
    )
    assert {c.key for c in configurations(points, SLO, 200)}.isdisjoint({c.key for c in configs})


def test_a_configuration_row_is_kvbudget_capacity_of_its_scenario(tmp_path: Path) -> None:
    (point,) = expand(grid_from_dict({"base": BASE, "grid": {"rate_per_s": [5.0]}}))
    (config,) = configurations([point], SLO, 100)
    row = capacity_row(config, SLO, 100)
    assert row["status"] == "simulated" and row["figures"] == "simulated"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(config.scenario))
    args = ["--scenario", str(scenario), "--slo", SLO, "--seeds", "1", "--num-requests", "100"]
    out = CliRunner().invoke(capacity, [*args, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert row["max_rate_per_s"] == doc["max_rate_per_s"]
    assert row["max_concurrency"] == doc["max_concurrency"]
    assert row["binding_constraint"] == doc["binding_constraint"]
    assert row["max_rate_confirmed"] == doc["max_rate_confirmed"]
    # the SLO's own percentiles at the highest passing rate, each within its ceiling
    passing = max(
        (p for p in doc["rate_points"] if p["meets_slo"] and p["load"] == doc["max_rate_per_s"]),
        key=lambda p: p["num_requests"],
    )
    assert row["slo_ttft_p95_s"] == passing["ttft_p95_s"] <= 0.5
    assert row["slo_tpot_p95_s"] == passing["tpot_p95_s"] <= 0.05


def _cap(key: str, gpu: str, gpus: int, cost: float | None, max_rate: float) -> dict[str, Any]:
    return {
        "key": key,
        "status": "simulated",
        "model": "m",
        "gpu": gpu,
        "tp": 1,
        "replicas": gpus,
        "kv_dtype": "auto",
        "num_gpus": gpus,
        "cost_usd_per_hour": cost,
        "max_rate_per_s": max_rate,
        "binding_constraint": "ttft_p95",
        "timing_model": "roofline",
        "slo_ttft_p95_s": 0.4,
    }


def test_cheapest_configuration_per_target_rate_by_hand() -> None:
    rows = [
        _cap("a", "L4", 1, 0.8, 40.0),
        _cap("b", "L4", 2, 1.6, 89.0),
        _cap("c", "H100-SXM", 1, 3.0, 120.0),
    ]
    answers = cheapest_for_rates(rows, [30.0, 50.0, 100.0, 200.0], priced=True)
    # 30: a, b, c reach it, a is cheapest ($0.80); 50: b ($1.60) and c; 100: only c; 200: none
    assert [a["key"] for a in answers] == ["a", "b", "c", None]
    assert [a["num_reaching"] for a in answers] == [3, 2, 1, 0]
    assert answers[0]["slo_ttft_p95_s"] == 0.4 and answers[0]["max_rate_per_s"] == 40.0
    # without prices: the fewest GPUs; a and c both have 1, the tie goes to the higher max rate
    unpriced = [{**r, "cost_usd_per_hour": None} for r in rows]
    assert cheapest_for_rates(unpriced, [30.0], priced=False)[0]["key"] == "c"


def test_a_growing_queue_meets_no_slo_and_is_flagged() -> None:
    grid = grid_from_dict({"slos": [{"name": "loose", "ttft_s": {"p95": 1000.0}}]})
    (slo,) = grid.slos
    row = {
        "status": "simulated",
        "requests_total": 10,
        "requests_completed": 10,
        "ttft_p95_s": 1.0,
    }
    assert meets({**row, "stable": True}, slo)
    assert meets({**row, "stable": None}, slo)  # a row written before the check
    assert not meets({**row, "stable": False}, slo)


def test_a_point_past_saturation_is_unstable_as_kvbudget_sim_says() -> None:
    # one L4 serves this workload at about 40 requests/s under any SLO (the search above); 400
    # requests/s outrun it, 2 requests/s do not
    data = {**BASE, "workload": {**BASE["workload"], "num_requests": 400}}  # type: ignore[dict-item]
    points = expand(grid_from_dict({"base": data, "grid": {"rate_per_s": [2.0, 400.0]}}))
    rows = {p.axes["rate_per_s"]: run_point(p) for p in points}
    assert rows[2.0]["stable"] is True and rows[2.0]["queue_ttft_growth_s_per_s"] is None
    assert rows[400.0]["stable"] is False and rows[400.0]["queue_ttft_growth_s_per_s"] > 0


def test_cheapest_is_quoted_at_the_slos_own_percentile() -> None:
    grid = grid_from_dict(
        {"slos": [{"name": "p95", "ttft_s": {"p95": 0.5}, "tpot_s": {"p95": 0.05}}]}
    )
    row = {
        "key": "k",
        "status": "simulated",
        "model": "m",
        "gpu": "L4",
        "tp": 1,
        "kv_dtype": "auto",
        "max_model_len": 4096,
        "prefix_caching": True,
        "router": "round_robin",
        "replicas": 1,
        "rate_per_s": 5.0,
        "num_gpus": 1,
        "requests_total": 10,
        "requests_completed": 10,
        "ttft_p95_s": 0.21,
        "ttft_p99_s": 0.9,
        "tpot_p95_s": 0.012,
        "tpot_p99_s": 0.07,
        "timing_model": "roofline",
    }
    (line,) = cheapest_lines(cheapest(derive([row], grid), grid))
    assert "TTFT p95 0.210 s (<= 0.5 s), TPOT p95 12.0 ms (<= 50 ms)" in line
    assert "p99" not in line
