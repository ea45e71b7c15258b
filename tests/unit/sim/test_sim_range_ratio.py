"""``sim --random-range-ratio``: lengths drawn as vLLM bench serve's random dataset draws them.

vLLM 0.32.0 ``vllm/benchmarks/datasets/utils.py`` ``get_sampling_params`` (lines 39-98):
input from ``[floor(L * (1 - r)), ceil(L * (1 + r))]``, output from the same with a floor of 1,
``rng.integers(low, high + 1)``; a JSON mapping sets input and output apart; ratios in [0, 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvbudget.cli.sim import sim
from kvbudget.errors import ConfigError
from kvbudget.workload.range_ratio import parse_range_ratio, ranged_length


def test_parse_like_vllm() -> None:
    assert parse_range_ratio("0.1") == (0.1, 0.1)
    assert parse_range_ratio('{"input": 0.3, "output": 0.5}') == (0.3, 0.5)
    assert parse_range_ratio("0") == (0.0, 0.0)
    for bad in ("1", "1.0", "-0.1", "x", '{"input": 0.3}', '{"input": 0.3, "output": 1}', "{"):
        with pytest.raises(ConfigError, match="--random-range-ratio"):
            parse_range_ratio(bad)


def test_ranges_by_hand() -> None:
    # 1024 * 0.9 = 921.6 -> 921; 1024 * 1.1 = 1126.4 -> 1127
    assert ranged_length(1024, 0.1) == {"kind": "uniform", "low": 921, "high": 1127}
    # 128 * 0.9 = 115.2 -> 115; 128 * 1.1 = 140.8 -> 141
    assert ranged_length(128, 0.1, minimum=1) == {"kind": "uniform", "low": 115, "high": 141}
    # 1 * 0.5 = 0.5 -> 0, floored to 1 (vLLM: output_low = max(output_low, 1)); 1.5 -> 2
    assert ranged_length(1, 0.5, minimum=1) == {"kind": "uniform", "low": 1, "high": 2}
    assert ranged_length(1024, 0.0) == {"kind": "fixed", "value": 1024}


def test_sim_draws_lengths_within_the_range(tmp_path: Path) -> None:
    out = tmp_path / "recs.jsonl"
    args = ["--num-requests", "400", "--concurrency", "8", "--input-tokens", "200"]
    args += ["--output-tokens", "20", "--random-range-ratio", '{"input": 0.5, "output": 0.25}']
    result = CliRunner().invoke(sim, [*args, "--records-out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    prompts = [r["prompt_tokens"] for r in recs]
    outputs = [r["output_tokens"] for r in recs]
    # input [100, 300], output [floor(15), ceil(25)] = [15, 25]; 400 uniform draws reach
    # within a few tokens of both ends and average near the middle
    assert 100 <= min(prompts) <= 105 and 295 <= max(prompts) <= 300
    assert min(outputs) == 15 and max(outputs) == 25
    assert sum(prompts) / len(prompts) == pytest.approx(200, rel=0.05)


def test_range_ratio_on_a_distribution_is_refused(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "workload:\n  num_requests: 4\n  arrivals: {kind: closed, concurrency: 2}\n"
        "  input_tokens: {kind: uniform, low: 10, high: 20}\n"
    )
    result = CliRunner().invoke(sim, ["--scenario", str(scenario), "--random-range-ratio", "0.1"])
    assert isinstance(result.exception, ConfigError)
    assert "workload.input_tokens is already a distribution (uniform)" in str(result.exception)
