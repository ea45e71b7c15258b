"""docs/accuracy.md's tables are what scripts/render_accuracy.py makes of bench/results/ (no
figure typed by hand)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.repo_scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def _renderer() -> ModuleType:
    return load_script("scripts/render_accuracy.py")


def test_accuracy_tables_match_their_raw_files() -> None:
    render = _renderer()
    text = (REPO / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert render.render(text) == text, "run: python scripts/render_accuracy.py"


def test_quantiles_by_hand() -> None:
    render = _renderer()
    # 5 values: the median is the 3rd; p90 sits 0.6 of the way from the 4th to the 5th
    assert render._quantile([0.1, 0.2, 0.3, 0.4, 1.4], 0.5) == 0.3
    assert abs(render._quantile([0.1, 0.2, 0.3, 0.4, 1.4], 0.9) - 1.0) < 1e-12


def test_exploded_rows_by_hand(tmp_path: Path) -> None:
    """Little's law on a row's own means, by hand: 512 requests in flight, 8,192 output tokens
    at 3.6 ms, TTFT 117.8 s: each request decodes 8,191 x 3.6 = 29,487.6 ms of its
    117,800 + 29,487.6 ms, so 512 x 29,487.6 / 147,287.6 = 102.504 decode at once (103); the pool of 14,193,072 tokens
    holds 14,193,072 // 9,216 = 1,540 full-length requests. A 4.9 s row is not exploded."""
    import json

    render = _renderer()
    sim = {"pool_tokens": 14_193_072, "mean_ttft_ms": 200.0}
    big = {
        "id": "big", "client": "fixed",
        "status": "simulated", "model": "m", "system": "h100_sxm", "tp": 8, "isl": 1024,
        "osl": 8192, "concurrency": 512, "regime": "below-knee",
        "measured": {"mean_ttft_ms": 117_800.0, "mean_tpot_ms": 3.6},
        "kvbudget_measured": sim, "kvbudget_roofline": sim, "server": {},
    }  # fmt: skip
    small = {**big, "id": "small", "measured": {"mean_ttft_ms": 4_900.0, "mean_tpot_ms": 3.6}}
    (tmp_path / "acc.json").write_text(json.dumps({"rows": [big, small]}), encoding="utf-8")
    render.RESULTS = tmp_path
    table = render.exploded("acc.json")
    assert table.startswith("1 simulated rows have a measured mean TTFT of 5 s or more; ")
    assert "calls 0 of them KV-limited. 0 rows it calls KV-limited stayed below 5 s." in table
    row = table.splitlines()[-1]
    assert "| 117.8 s | below-knee | 14,193,072 / 4,718,592 | 0.2 s | auto | 103 | 1,540 |" in row


def test_version_gap_by_hand() -> None:
    """Two MoE tables with two shared points of gpt-oss-120b's shape: 0.19.0 at 2 and 30 ms,
    0.24.0 at 1 and 10 ms (its faster of two kernels), so the ratios are 2 (64 tokens: decode)
    and 3 (2,048 tokens: prefill); a point only one table has is left out."""
    import pandas as pd

    bench = load_script("bench/aic_version_gap.py")
    key = {
        "moe_dtype": "w4a16_mxfp4", "hidden_size": 2880, "inter_size": 2880, "num_experts": 128,
        "topk": 4, "moe_tp_size": 1, "moe_ep_size": 1, "distribution": "balanced",
    }  # fmt: skip
    old = pd.DataFrame(
        [{**key, "num_tokens": 64, "latency": 2.0}, {**key, "num_tokens": 2048, "latency": 30.0},
         {**key, "num_tokens": 4096, "latency": 70.0}]
    )  # fmt: skip
    new = pd.DataFrame(
        [{**key, "num_tokens": 64, "latency": 1.0}, {**key, "num_tokens": 2048, "latency": 12.0},
         {**key, "num_tokens": 2048, "latency": 10.0}]
    )  # fmt: skip
    bench._table = lambda system, version: old if version == bench.OLD else new
    (entry,) = bench.gap("h200_sxm")
    assert entry["model"] == "openai/gpt-oss-120b" and entry["num_points"] == 2
    assert entry["decode"] == {"num_points": 1, "median": 2.0, "p10": 2.0, "p90": 2.0}
    assert entry["prefill"] == {"num_points": 1, "median": 3.0, "p10": 3.0, "p90": 3.0}


def test_version_gap_quantiles_interpolate_by_hand() -> None:
    """Eleven ratios 1.0, 1.1, ... 2.0: p10 at position 10 x 0.1 = 1 (1.1), the median the 6th
    (1.5), p90 at position 9 (1.9); five ratios 1, 2, 3, 4, 10: p90 at position 3.6, 0.6 of
    the way from 4 to 10 (7.6), as render_accuracy._quantile places it."""
    bench = load_script("bench/aic_version_gap.py")
    eleven = [1.0 + i / 10 for i in range(11)]
    assert bench._quantiles(eleven) == {"median": 1.5, "p10": 1.1, "p90": 1.9}
    assert bench._quantiles([1.0, 2.0, 3.0, 4.0, 10.0])["p90"] == 7.6
    render = _renderer()
    assert abs(render._quantile([1.0, 2.0, 3.0, 4.0, 10.0], 0.9) - 7.6) < 1e-12


def test_exploded_rows_of_a_data_parallel_inferencex_deployment(tmp_path: Path) -> None:
    """Two engines, each a pool of 1,000,000 tokens: the deployment holds 2,000,000, 217 requests
    of 9,216 tokens. InferenceX's outputs average (int(0.8 x 1,024) + 1,024) / 2 = 921.5 tokens,
    so a request decodes 920.5 x 50 = 46,025 ms of 46,025 + 10,000: 256 x 46,025 / 56,025 =
    210.3 at once. The script's KV dtype changed that day, so the one simulated is said so."""
    import json

    render = _renderer()
    sim = {"pool_tokens": 1_000_000, "mean_ttft_ms": 900.0}
    row = {
        "id": "dp", "client": "inferencex", "status": "simulated", "model": "m",
        "system": "b200_sxm", "tp": 2, "isl": 8192, "osl": 1024, "concurrency": 256,
        "regime": "below-knee", "data_parallel_size": 2,
        "measured": {"mean_ttft_ms": 10_000.0, "mean_tpot_ms": 50.0},
        "kvbudget_measured": sim, "kvbudget_roofline": sim,
        "server": {"applied": {"block_size": 32}, "not_applied": ["kv_dtype"]},
    }  # fmt: skip
    (tmp_path / "acc.json").write_text(json.dumps({"rows": [row]}), encoding="utf-8")
    render.RESULTS = tmp_path
    line = render.exploded("acc.json").splitlines()[-1]
    assert (
        "| 2,000,000 / 2,359,296 | 0.9 s | auto (its script's KV dtype changed that day) |" in line
    )
    assert line.endswith("| 210 | 217 |")


def test_the_renderer_draws_inferencex_lengths_as_the_bench_does() -> None:
    bench = load_script("bench/gpu_accuracy.py")
    assert _renderer().INFERENCEX_RANGE_RATIO == bench.INFERENCEX_RANGE_RATIO
