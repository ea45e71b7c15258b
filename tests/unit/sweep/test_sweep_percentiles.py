"""``kvbudget sweep --metric-percentiles``: each point's mean, median and chosen percentiles of
TTFT, TPOT, ITL and E2E; an SLO judged and drawn at its own percentile.

Expected values are hand arithmetic (numpy's default linear percentile, as ``vllm bench serve``
computes them with ``np.percentile``), or numpy on the simulator's raw per-request times,
never the sweep's own figures.
"""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from kvbudget.cli.main import main
from kvbudget.cli.sweep import sweep
from kvbudget.maxload.point import judge
from kvbudget.maxload.slo import parse_slo
from kvbudget.records import RequestRecord
from kvbudget.sweep.grid import expand, grid_from_dict
from kvbudget.sweep.pareto import panels, render_pareto
from kvbudget.sweep.point import run_point
from kvbudget.sweep.run import write_outputs
from kvbudget.sweep.table import columns, derive, has_figures, meets, point_percentiles

BASE = {
    "model": "meta-llama/Llama-3.2-1B-Instruct",
    "max_model_len": 4096,
    "workload": {
        "num_requests": 40,
        "input_tokens": {"kind": "fixed", "value": 256},
        "output_tokens": {"kind": "fixed", "value": 8},
    },
}
#: five latencies whose percentiles are worked by hand below
TTFTS = (0.1, 0.2, 0.3, 0.4, 1.0)


def test_point_percentiles_add_p50_p99_and_each_slos_own() -> None:
    grid = grid_from_dict({"slos": [{"name": "chat", "ttft_s": {"p95": 0.5}}]})
    # chosen 90, the grid SLO's 95, --slo's 99.9, and 50 and 99 always
    assert point_percentiles(grid, (90.0,), (99.9,)) == (50.0, 90.0, 95.0, 99.0, 99.9)
    assert point_percentiles(grid_from_dict({})) == (50.0, 90.0, 95.0, 99.0)


def test_csv_columns_follow_the_chosen_percentiles() -> None:
    cols = columns(grid_from_dict({}), (50.0, 90.0, 99.0))
    for metric in ("ttft", "tpot", "itl", "e2e"):
        wanted = ["mean", "median", "p50", "p90", "p99"]
        assert [c for c in cols if c.startswith(f"{metric}_")] == [
            f"{metric}_{w}_s" for w in wanted
        ]
    assert "ttft_p95_s" not in cols


def _latencies(point_scenario: dict[str, Any]) -> dict[str, list[float]]:
    """Each request's TTFT, TPOT, gaps and E2E straight from the simulator's requests."""
    from kvbudget.sim.cluster import simulate
    from kvbudget.sim.scenario import build_cluster, build_workload, scenario_from_dict

    scenario = scenario_from_dict(dict(point_scenario), origin="test")
    cluster = build_cluster(scenario)
    requests, cluster.concurrency = build_workload(scenario)
    cluster.record_token_times = True
    result = simulate(requests, cluster, seed=scenario.seed)
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": [], "e2e": []}
    for r in result.requests:
        if r.status != "finished" or r.first_token_s is None or r.finish_s is None:
            continue
        out["ttft"].append(r.first_token_s - r.arrival_s)
        out["tpot"].append((r.finish_s - r.first_token_s) / (r.output_tokens - 1))
        out["itl"].extend(float(g) for g in np.diff(r.token_times_s))
        out["e2e"].append(r.finish_s - r.arrival_s)
    return out


def test_a_point_gives_mean_median_and_the_chosen_percentiles_of_four_metrics() -> None:
    (point,) = expand(grid_from_dict({"base": BASE, "grid": {"rate_per_s": [20.0]}}))
    row = run_point(point, (50.0, 75.0, 99.0, 99.9))
    assert row["status"] == "simulated" and row["metric_percentiles"] == [50.0, 75.0, 99.0, 99.9]
    raw = _latencies(point.scenario)
    assert len(raw["ttft"]) == 40 and len(raw["itl"]) == 40 * 7  # 8 tokens: 7 gaps each
    for metric, values in raw.items():
        arr = np.asarray(values)
        assert row[f"{metric}_mean_s"] == pytest.approx(float(np.mean(arr)), rel=1e-12)
        assert row[f"{metric}_median_s"] == pytest.approx(float(np.median(arr)), rel=1e-12)
        for q in (50, 75, 99, 99.9):
            name = f"{metric}_p{q:g}_s"
            assert row[name] == pytest.approx(float(np.percentile(arr, q)), rel=1e-12), name
        assert f"{metric}_p95_s" not in row  # not chosen
    assert has_figures(row, (50.0, 75.0, 99.0, 99.9))
    assert not has_figures(row, (95.0,))  # --resume with p95 simulates it again


def _row(p95: float, p99: float) -> dict[str, Any]:
    return {
        "key": "k",
        "status": "simulated",
        "requests_total": 5,
        "requests_completed": 5,
        "stable": True,
        "ttft_p95_s": p95,
        "ttft_p99_s": p99,
    }


def test_a_grid_slo_is_judged_at_its_own_percentile() -> None:
    # TTFTS by hand (linear, numpy's default): rank (n-1)q = 4q
    #   p95: 3.8 -> 0.4 + 0.8 x (1.0 - 0.4) = 0.88; p99: 3.96 -> 0.4 + 0.96 x 0.6 = 0.976
    p95, p99 = 0.88, 0.976
    assert float(np.percentile(TTFTS, 95)) == pytest.approx(p95)
    assert float(np.percentile(TTFTS, 99)) == pytest.approx(p99)
    grid = grid_from_dict(
        {
            "slos": [
                {"name": "p95", "ttft_s": {"p95": 0.9}},
                {"name": "p99", "ttft_s": {"p99": 0.9}},
            ]
        }
    )
    at95, at99 = grid.slos
    assert meets(_row(p95, p99), at95)  # 0.88 <= 0.9
    assert not meets(_row(p95, p99), at99)  # 0.976 > 0.9


def _record(i: int, ttft_s: float) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        source="simulated",
        status="ok",
        sent_s=float(i),
        first_token_s=float(i) + ttft_s,
        done_s=float(i) + ttft_s,
        output_tokens=1,
    )


def test_the_slo_of_sweep_slo_is_checked_at_its_own_percentile() -> None:
    # sweep --slo runs kvbudget capacity's search, whose probes judge each term at its own
    # statistic (kvbudget.maxload.point.judge); TTFTS as worked above: p90 = 0.4 + 0.6 x 0.6
    records = [_record(i, t) for i, t in enumerate(TTFTS)]

    def point(slo: str) -> Any:
        return judge(
            records,
            parse_slo(slo),
            kind="concurrency",
            load=1.0,
            seed=0,
            duration_s=5.0,
            num_preemptions=0,
        )

    p90 = point("ttft_p90<800ms")
    assert p90.values == {"ttft_p90_s": pytest.approx(0.76)} and p90.failing == ()
    p95 = point("ttft_p95<800ms")
    assert p95.values == {"ttft_p95_s": pytest.approx(0.88)} and p95.failing == ("ttft_p95",)


def test_the_chart_plots_the_slos_statistic_and_draws_its_lines() -> None:
    grid = grid_from_dict({"slos": [{"name": "chat", "ttft_s": {"p95": 0.5, "p99": 0.8}}]})
    specs = panels(grid, "ttft_p95<1s,tpot_p90<50ms,e2e_p99<4s")
    assert [(k, label) for k, label, _ in specs] == [
        ("ttft_p95_s", "TTFT p95 (s)"),
        ("tpot_p90_s", "TPOT p90 (ms)"),
        ("e2e_p99_s", "E2E p99 (s)"),
    ]
    # the TTFT panel draws --slo's 1 s and the grid SLO's p95 (0.5 s), not its p99
    assert specs[0][2] == [("--slo ttft_p95", 1.0), ("SLO chat p95", 0.5)]
    assert specs[1][2] == [("--slo tpot_p90", 0.05)]
    # without --slo: p99 panels and the grid SLO's p99
    plain = panels(grid)
    assert [k for k, _, _ in plain] == ["ttft_p99_s", "tpot_p99_s"]
    assert plain[0][2] == [("SLO chat p99", 0.8)]
    rows = derive(
        [
            {
                **_row(0.3, 0.4),
                "timing_model": "roofline",
                "num_gpus": 1,
                "rate_per_s": 1.0,
                "tpot_p90_s": 0.02,
                "e2e_p99_s": 1.0,
            }
        ],
        grid,
    )
    svg = render_pareto(rows, grid, slo="ttft_p95<1s,tpot_p90<50ms,e2e_p99<4s")
    ET.fromstring(svg)
    for text in ("--slo ttft_p95 &lt;= 1", "--slo tpot_p90 &lt;= 50", "--slo e2e_p99 &lt;= 4"):
        assert text in svg, text
    assert "TTFT p95 (s)" in svg and "SLO chat p95 &lt;= 0.5" in svg


def test_written_table_and_summary_name_the_percentiles(tmp_path: Path) -> None:
    grid = grid_from_dict({"base": BASE, "grid": {"rate_per_s": [20.0]}})
    (point,) = expand(grid)
    chosen = point_percentiles(grid, (90.0,))
    outcome = write_outputs(tmp_path, [run_point(point, chosen)], grid, metric_percentiles=chosen)
    assert outcome.metric_percentiles == [50.0, 90.0, 99.0]
    with (tmp_path / "results.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert float(row["itl_p90_s"]) > 0 and float(row["e2e_mean_s"]) > 0
    assert "ttft_p95_s" not in row
    assert (
        '"metric_percentiles": [\n    50.0,\n    90.0,\n    99.0\n  ]'
        in (tmp_path / "summary.json").read_text()
    )


@pytest.mark.parametrize(("value", "item"), [("95,abc", "abc"), ("0", "0"), ("100", "100")])
def test_a_bad_metric_percentiles_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, item: str
) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("base: {}\n")
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(grid), "--out", str(tmp_path / "o"), "--metric-percentiles", value])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2
    assert err == (
        f"ConfigError: --metric-percentiles {value!r}: {item!r} is not a percentile between 0 "
        'and 100 (exclusive); give comma-separated numbers, e.g. "50,90,95,99"'
    )
    assert not (tmp_path / "o").exists()  # refused before anything ran


def test_help_names_the_flag() -> None:
    out = CliRunner().invoke(sweep, ["--help"])
    assert out.exit_code == 0 and "--metric-percentiles" in out.output
