"""``kvbudget sweep`` on a local Ray (``ray.init(num_cpus=2)``): outputs, labels, resume, errors.

The CLI runs in-process, so it uses the session's Ray instead of starting another."""

from __future__ import annotations

import csv
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.cli.main import main

GRID = {
    "base": {
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "max_model_len": 4096,
        "workload": {
            "num_requests": 40,
            "input_tokens": {"kind": "fixed", "value": 512},
            "output_tokens": {"kind": "fixed", "value": 16},
        },
    },
    "grid": {"gpu": ["H100-SXM", "L4"], "replicas": [1, 2], "rate_per_s": [5.0]},
    "slos": [{"name": "chat", "ttft_s": {"p99": 0.5}, "tpot_s": {"p99": 0.05}}],
    "gpu_hour_usd": {"H100-SXM": 3.0, "L4": 0.8},
}


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def _grid_file(tmp_path: Path, data: dict[str, Any] = GRID) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.timeout(240)
def test_sweep_writes_labelled_table_chart_and_cheapest(
    ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid, out = _grid_file(tmp_path), tmp_path / "out"
    code, stdout, err = _cli(["sweep", str(grid), "--out", str(out), "--workers", "2"], capsys)
    assert code == 0, err
    rows = _rows(out / "results.jsonl")
    assert len(rows) == 4 and len({r["key"] for r in rows}) == 4
    assert all(r["status"] == "simulated" and r["figures"] == "simulated" for r in rows)
    # H100-SXM has aiconfigurator-core's vLLM tables; L4 has none, so auto names the roofline
    # and why (sim/timing_select.py)
    for r in rows:
        expected = "measured (aiconfigurator-core" if r["gpu"] == "H100-SXM" else "roofline (auto"
        assert r["timing_model"].startswith(expected), (r["gpu"], r["timing_model"])
    # simulated in Ray worker processes, not here
    assert all(r["worker_pid"] != os.getpid() for r in rows)
    with (out / "results.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 4 and "meets_chat" in table[0] and "cost_usd_per_hour" in table[0]
    assert {t["figures"] for t in table} == {"simulated"}
    # cost: num_gpus x price (hand arithmetic)
    for t in table:
        price = GRID["gpu_hour_usd"][t["gpu"]]  # type: ignore[index]
        assert float(t["cost_usd_per_hour"]) == pytest.approx(price * int(t["replicas"]))
    ET.fromstring((out / "pareto.svg").read_text())
    summary = json.loads((out / "summary.json").read_text())
    (answer,) = summary["cheapest"]
    # a 1B model at 5 req/s meets a 0.5 s / 50 ms SLO on every point (TTFT p99 well under
    # 0.1 s in each row); the cheapest by $/h is then one L4 ($0.80/h)
    meeting = [t for t in table if t["meets_chat"] == "True"]
    assert answer["num_meeting"] == len(meeting) == 4
    assert all(float(t["ttft_p99_s"]) < 0.5 and float(t["tpot_p99_s"]) < 0.05 for t in table)
    best = next(t for t in table if t["gpu"] == "L4" and t["replicas"] == "1")
    assert answer["key"] == best["key"] and answer["cost_usd_per_hour"] == pytest.approx(0.8)
    assert "SLO chat at 5 req/s: cheapest is 1 x L4" in stdout
    assert "figures: simulated" in stdout and "4 simulated now on 2 worker(s)" in stdout


@pytest.mark.timeout(240)
def test_resume_skips_done_points(
    ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {**GRID, "grid": {"gpu": ["H100-SXM"], "replicas": [1, 2], "rate_per_s": [5.0]}}
    grid, out = _grid_file(tmp_path, data), tmp_path / "out"
    code, _, err = _cli(["sweep", str(grid), "--out", str(out), "--json"], capsys)
    assert code == 0, err
    first = _rows(out / "results.jsonl")
    assert len(first) == 2
    # the same DIR without --resume is refused in one line, nothing touched
    code, _, err = _cli(["sweep", str(grid), "--out", str(out)], capsys)
    assert code == 2 and "--resume" in err and len(err.strip().splitlines()) == 1
    assert _rows(out / "results.jsonl") == first
    # everything done: nothing simulated again
    code, stdout, err = _cli(["sweep", str(grid), "--out", str(out), "--resume", "--json"], capsys)
    assert code == 0, err
    result = json.loads(stdout)
    assert (result["num_simulated"], result["num_skipped"]) == (0, 2)
    # one point lost (and a cut last line): only that one is simulated again
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text(lines[0] + "\n" + lines[1][:20])
    code, stdout, err = _cli(["sweep", str(grid), "--out", str(out), "--resume", "--json"], capsys)
    assert code == 0, err
    result = json.loads(stdout)
    assert (result["num_simulated"], result["num_skipped"]) == (1, 1)
    again = {r["key"]: r for r in _rows(out / "results.jsonl")}
    assert set(again) == {r["key"] for r in first}
    lost = next(r for r in first if r["key"] != json.loads(lines[0])["key"])
    # deterministic: the same point simulates to the same figures
    assert again[lost["key"]]["ttft_p99_s"] == lost["ttft_p99_s"]


def test_without_ray_one_line_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    code, _, err = _cli(["sweep", str(_grid_file(tmp_path)), "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    assert err.strip() == (
        "ConfigError: kvbudget sweep needs Ray, which is not installed; install it with "
        "pip install 'kvbudget[ray]'"
    )
    assert not (tmp_path / "o").exists()


def test_bad_grid_fails_before_ray_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {**GRID, "grid": {"tp": [1], "gpus": ["H100-SXM"]}}
    code, _, err = _cli(
        ["sweep", str(_grid_file(tmp_path, data)), "--out", str(tmp_path / "o")], capsys
    )
    assert code == 2 and "grid.gpus" in err and len(err.strip().splitlines()) == 1


@pytest.mark.timeout(300)
def test_slo_gives_each_configuration_its_max_rate_and_the_cheapest_per_rate(
    ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {**GRID, "grid": {"gpu": ["L4"], "replicas": [1, 2], "rate_per_s": [5.0, 10.0]}}
    grid, out = _grid_file(tmp_path, data), tmp_path / "out"
    slo = "ttft_p95<500ms,tpot_p95<50ms"
    args = ["sweep", str(grid), "--out", str(out), "--slo", slo, "--capacity-requests", "60"]
    code, stdout, err = _cli([*args, "--target-rate", "1", "--target-rate", "1000"], capsys)
    assert code == 0, err
    caps = _rows(out / "capacity.jsonl")
    # four points, two configurations (the rate is what the search varies)
    assert len(_rows(out / "results.jsonl")) == 4 and len(caps) == 2
    assert all(c["status"] == "simulated" and c["figures"] == "simulated" for c in caps)
    by_replicas = {c["replicas"]: c for c in caps}
    one, two = by_replicas[1]["max_rate_per_s"], by_replicas[2]["max_rate_per_s"]
    # a round-robin pair of identical replicas holds more than one alone
    assert 0 < one < two
    for c in caps:  # the SLO's own percentile at the answer, within its ceiling
        assert c["slo_ttft_p95_s"] <= 0.5 and c["slo_tpot_p95_s"] <= 0.05
    summary = json.loads((out / "summary.json").read_text())
    low, high = summary["cheapest_for_rate"]
    # 1 req/s: both reach it, one L4 ($0.80/h) is cheaper; 1000 req/s: neither
    assert low["target_rate_per_s"] == 1.0 and low["key"] == by_replicas[1]["key"]
    assert low["cost_usd_per_hour"] == pytest.approx(0.8)
    assert high["key"] is None and high["num_reaching"] == 0
    assert "for 1 req/s under 'ttft_p95<500ms,tpot_p95<50ms': cheapest is 1 x L4" in stdout
    assert "for 1000 req/s" in stdout and "no configuration reaches it" in stdout
    # resume: every search already done, none repeated
    code, stdout, err = _cli([*args, "--resume", "--json"], capsys)
    assert code == 0, err
    assert _rows(out / "capacity.jsonl") == caps
    assert [c["key"] for c in json.loads(stdout)["capacity"]] == [c["key"] for c in caps]


@pytest.mark.timeout(240)
def test_metric_percentiles_choose_the_columns_and_resume_fills_new_ones(
    ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {**GRID, "grid": {"gpu": ["H100-SXM"], "rate_per_s": [5.0]}}
    grid, out = _grid_file(tmp_path, data), tmp_path / "out"
    args = ["sweep", str(grid), "--out", str(out), "--json"]
    code, stdout, err = _cli([*args, "--metric-percentiles", "90,99.9"], capsys)
    assert code == 0, err
    # chosen 90 and 99.9; p50, p99 always; the grid SLO's p99 already among them
    assert json.loads(stdout)["metric_percentiles"] == [50.0, 90.0, 99.0, 99.9]
    with (out / "results.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for stat in ("mean", "median", "p50", "p90", "p99", "p99.9"):
            assert float(row[f"{metric}_{stat}_s"]) > 0, (metric, stat)
    assert "ttft_p95_s" not in row
    # the default set asks for p95, which the row lacks: --resume simulates the point again
    code, stdout, err = _cli([*args, "--resume"], capsys)
    assert code == 0, err
    result = json.loads(stdout)
    assert (result["num_simulated"], result["num_skipped"]) == (1, 0)
    assert result["metric_percentiles"] == [50.0, 90.0, 95.0, 99.0]
    (again,) = _rows(out / "results.jsonl")[-1:]
    assert again["ttft_p95_s"] is not None
