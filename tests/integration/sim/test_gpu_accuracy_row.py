"""One silicon row end to end: bench/gpu_accuracy.py's replay of a real vLLM run.

The row (aiconfigurator-core 0.12.0, ``systems/silicon_sample.csv``): Qwen/Qwen3-32B, bf16, on 2 x
H100-SXM (TP 2), vLLM 0.12.0, 1,024 input and 128 output tokens, closed loop at concurrency 8;
measured mean TTFT 154.2 ms, mean TPOT 18.04 ms. The row is a validation point: nothing is fitted
to it; the bounds below are loose (the measured model's tables are vLLM 0.24.0's), they catch a
step priced in the wrong unit or on the wrong op graph, which lands far outside them.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.repo_scripts import load_script

REPO = Path(__file__).resolve().parents[3]
ROW = "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1"


def _bench() -> ModuleType:
    return load_script("bench/gpu_accuracy.py")


def test_one_silicon_row_end_to_end() -> None:
    import aiconfigurator_core  # noqa: F401  (the gpu-data extra make test installs: never skipped)

    bench = _bench()
    (row,) = [r for r in bench.silicon_rows() if r["id"] == ROW]
    assert (row["model_path"], row["system"], row["tp_size"], row["batch_size"]) == (
        "Qwen/Qwen3-32B",
        "h100_sxm",
        "2",
        "8",
    )
    out = bench.run_row(row)
    assert out["status"] == "simulated" and out["regime"] == "below-knee"
    assert out["measured"] == {"mean_ttft_ms": 154.2481599, "mean_tpot_ms": 18.0370482875}
    sim = out["kvbudget_measured"]
    assert sim["timing_model"] == (
        "measured (aiconfigurator-core 0.12.0, h100_sxm, vllm 0.24.0 tables; engine vllm 0.12.0)"
    )
    assert out["kvbudget_roofline"]["timing_model"] == "roofline"
    # the row's source names no client: fixed lengths, 10 x concurrency requests
    assert out["client"] == "fixed"
    assert sim["num_completed"] == sim["num_requests"] == 80
    # within a factor 1.5 of the real run's TPOT (a wrong unit or op graph is far outside)
    assert 18.04 / 1.5 < sim["mean_tpot_ms"] < 18.04 * 1.5
    # TTFT: a closed loop of 8 starting together prefills 8 x 1,024 tokens in the first steps;
    # at least one prefill of 1,024 tokens, at most the whole wave several times over
    assert 154.2 / 4 < sim["mean_ttft_ms"] < 154.2 * 4
    static = out["aic_static"]
    assert static["mean_tpot_ms"] > 0 and static["mean_ttft_ms"] > 0
