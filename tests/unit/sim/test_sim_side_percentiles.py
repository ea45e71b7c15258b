"""``sim``'s llama.cpp and P/D paths give the mean, the median and ``--metric-percentiles`` like
the main path (issue 31), values hand-computed with numpy's linear interpolation."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvbudget.cli.main import main
from kvbudget.sim.disagg import latency_summary


@dataclass
class _Done:
    arrival_s: float
    first_token_s: float
    finish_s: float
    output_tokens: int
    finished: bool = True


def test_pd_latency_summary_by_hand() -> None:
    reqs = [
        _Done(0.0, 0.1, 1.1, 11),  # TTFT 0.1, TPOT (1.1 - 0.1) / 10 = 0.1, E2E 1.1
        _Done(1.0, 1.2, 1.6, 5),  # TTFT 0.2, TPOT 0.4 / 4 = 0.1, E2E 0.6
        _Done(2.0, 2.3, 2.3, 1),  # TTFT 0.3, no TPOT (one token), E2E 0.3
    ]
    got = latency_summary(reqs, (90.0,))  # type: ignore[arg-type]
    assert got["ttft_mean_s"] == pytest.approx(0.2)
    assert got["ttft_median_s"] == pytest.approx(0.2)
    # p90 of (0.1, 0.2, 0.3): rank (3 - 1) x 0.9 = 1.8 -> 0.2 + 0.8 x 0.1 = 0.28
    assert got["ttft_p90_s"] == pytest.approx(0.28)
    assert got["ttft_p99_s"] == pytest.approx(0.298)  # always reported
    assert got["tpot_mean_s"] == pytest.approx(0.1)
    assert got["e2e_mean_s"] == pytest.approx((1.1 + 0.6 + 0.3) / 3)
    assert got["requests_completed"] == 3


def test_llamacpp_sim_honours_metric_percentiles(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    records = tmp_path / "r.jsonl"
    argv = ["sim", "--engine", "llamacpp", "--requests", "30", "--input-tokens", "64"]
    argv += ["--output-tokens", "6", "--metric-percentiles", "90,95", "--json"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--records-out", str(records)])
    assert info.value.code in (0, None)
    summary = json.loads(capsys.readouterr().out)
    rows = [json.loads(x) for x in records.read_text().splitlines() if x.strip()]
    ttft = [r["ttft_s"] for r in rows if r["status"] == "ok"]
    assert summary["ttft_mean_s"] == pytest.approx(sum(ttft) / len(ttft))
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for key in ("mean", "median", "p50", "p90", "p95", "p99"):
            assert summary[f"{metric}_{key}_s"] is not None, (metric, key)
    assert summary["metric_percentiles"] == [90.0, 95.0]
