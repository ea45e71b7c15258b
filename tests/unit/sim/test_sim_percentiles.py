"""``sim`` summary latency figures (mean, median, chosen percentiles of TTFT, TPOT, ITL, E2E)
against a timeline worked by hand and numpy's percentiles of the hand-worked values."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from kvbudget.cli.main import cli
from kvbudget.errors import ConfigError
from kvbudget.metrics.percentile_set import parse_metric_percentiles
from kvbudget.sim.cluster import ClusterSpec, simulate, simulate_stream
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming

# One replica, steps of 10 ms + 1 ms per token computed; prompts of 4 tokens, 3 output tokens;
# arrivals at 0, 5 ms and 25 ms. By hand (a request arriving mid-step waits for the next):
#   step 1 [0, 14 ms]: r0 prefill (4)                         -> r0 token 1 at 14
#   step 2 [14, 29]: r0 decode + r1 prefill (5 tokens)         -> r0 2, r1 1 at 29
#   step 3 [29, 45]: r0, r1 decode + r2 prefill (6)            -> r0 3 (done), r1 2, r2 1 at 45
#   step 4 [45, 57]: r1, r2 decode (2)                         -> r1 3 (done), r2 2 at 57
#   step 5 [57, 68]: r2 decode (1)                             -> r2 3 (done) at 68
TTFT = [0.014, 0.029 - 0.005, 0.045 - 0.025]
E2E = [0.045, 0.057 - 0.005, 0.068 - 0.025]
TPOT = [(0.045 - 0.014) / 2, (0.057 - 0.029) / 2, (0.068 - 0.045) / 2]
ITL = [0.015, 0.016, 0.016, 0.012, 0.012, 0.011]


def _requests() -> list[EngineRequest]:
    return [
        EngineRequest(f"r{i}", tuple(range(10 * i, 10 * i + 4)), 3, arrival_s=t)
        for i, t in enumerate((0.0, 0.005, 0.025))
    ]


def _cluster() -> ClusterSpec:
    cfg = ReplicaConfig(
        num_gpu_blocks=64,
        block_size=4,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        max_model_len=64,
        enable_prefix_caching=False,
    )
    timing = FixedTiming(step_s=0.010, per_token_s=0.001)
    return ClusterSpec([ReplicaSetup(cfg, timing)], record_token_times=True)


def _expected(values: list[float], name: str, qs: tuple[float, ...]) -> dict[str, float]:
    out = {f"{name}_mean_s": float(np.mean(values)), f"{name}_median_s": float(np.median(values))}
    out.update({f"{name}_p{q:g}_s": float(np.percentile(values, q)) for q in qs})
    return out


@pytest.mark.parametrize("streamed", [False, True])
def test_summary_latencies_match_the_hand_worked_timeline(streamed: bool) -> None:
    qs = (50.0, 90.0, 95.0, 99.0)
    if streamed:
        summary = simulate_stream(iter(_requests()), _cluster()).summary()
    else:
        result = simulate(_requests(), _cluster())
        times = {r.request_id: r.token_times_s for r in result.requests}
        assert times["r0"] == pytest.approx((0.014, 0.029, 0.045))
        assert times["r2"] == pytest.approx((0.045, 0.057, 0.068))
        summary = result.summary()
    for name, values in (("ttft", TTFT), ("e2e", E2E), ("tpot", TPOT), ("itl", ITL)):
        for key, value in _expected(values, name, qs).items():
            assert summary[key] == pytest.approx(value, abs=1e-12), key


def test_chosen_percentiles_and_always_p50_p99() -> None:
    summary = simulate(_requests(), _cluster()).summary((75.0, 99.9))
    assert summary["ttft_p75_s"] == pytest.approx(float(np.percentile(TTFT, 75)))
    assert summary["itl_p99.9_s"] == pytest.approx(float(np.percentile(ITL, 99.9)))
    assert "ttft_p50_s" in summary and "ttft_p99_s" in summary and "ttft_p90_s" not in summary
    assert summary["metric_percentiles"] == [75.0, 99.9]


def test_records_keep_the_token_times() -> None:
    record = simulate(_requests(), _cluster()).requests[1].to_record()
    assert record.token_times_s == pytest.approx([0.029, 0.045, 0.057])
    assert record.itl_s() == pytest.approx([0.016, 0.012])


def test_parse_metric_percentiles() -> None:
    assert parse_metric_percentiles("99, 50,90") == (50.0, 90.0, 99.0)
    for bad in ("", "p99", "100", "0", "50,,90"):
        with pytest.raises(ConfigError, match="--metric-percentiles"):
            parse_metric_percentiles(bad)


def test_sim_cli_metric_percentiles_flag() -> None:
    args = ["sim", "--num-requests", "8", "--concurrency", "2", "--json"]
    out = CliRunner().invoke(cli, [*args, "--metric-percentiles", "95"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert summary["metric_percentiles"] == [95.0]
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for key in ("mean", "median", "p50", "p95", "p99"):
            assert summary[f"{metric}_{key}_s"] is not None, (metric, key)
    bad = CliRunner().invoke(cli, [*args, "--metric-percentiles", "x"])
    assert isinstance(bad.exception, ConfigError)
    assert "--metric-percentiles 'x'" in str(bad.exception)


def test_no_itl_leaves_itl_out() -> None:
    args = ["sim", "--num-requests", "8", "--concurrency", "2", "--json", "--no-itl"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert summary["itl_mean_s"] is None and summary["itl_p99_s"] is None
    assert summary["ttft_p95_s"] is not None
