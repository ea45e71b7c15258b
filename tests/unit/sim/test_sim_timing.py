"""Step-time models against hand-worked numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.errors import ConfigError
from kvbudget.sim.timing import (
    BatchShape,
    CalibratedTiming,
    CalibrationProfile,
    GpuPerf,
    ModelCost,
    RooflineParams,
    RooflineTiming,
)

MODEL = ModelCost(
    model_id="toy",
    num_layers=2,
    hidden_size=8,
    num_attention_heads=2,
    head_dim=4,
    num_active_params=1e9,
    weights_bytes=2e9,
    kv_bytes_per_token=1000.0,
)
GPU = GpuPerf("toy-gpu", 80e9, bandwidth_bytes_per_s=1e12, peak_flops=1e15, link_bytes_per_s=1e11)
PARAMS = RooflineParams(compute_efficiency=0.5, bandwidth_efficiency=0.5, step_overhead_s=0.001)


def test_roofline_decode_is_memory_bound_by_hand() -> None:
    t = RooflineTiming(MODEL, GPU, params=PARAMS)
    # 4 sequences, 1000 context tokens in all:
    # bytes = 2e9 + 1000 B * (1000 ctx + 4 new) = 2.001004e9 -> / (1e12 * 0.5) = 4.002008 ms
    # flops = 2e9 * 4 + 4 * 2 * 2 * 4 * 1000 = 8.000064e9 -> / 5e14 = 0.016 ms
    shape = BatchShape(num_decode_seqs=4, decode_context_tokens=1000)
    assert t.step_time_s(shape) == pytest.approx(2.001004e9 / 5e11 + 0.001)


def test_roofline_prefill_is_compute_bound_by_hand() -> None:
    t = RooflineTiming(MODEL, GPU, params=PARAMS)
    n = 4096
    pairs = n * (n + 1) / 2
    flops = 2e9 * n + 4 * 2 * 2 * 4 * pairs
    num_bytes = 2e9 + 1000 * (n + n)
    expected = max(flops / 5e14, num_bytes / 5e11) + 0.001
    assert flops / 5e14 > num_bytes / 5e11
    assert t.prefill_time_s(n) == pytest.approx(expected)


def test_tensor_parallel_adds_allreduce_and_splits_work() -> None:
    t1 = RooflineTiming(MODEL, GPU, params=PARAMS)
    t2 = RooflineTiming(MODEL, GPU, tp=2, params=PARAMS)
    shape = BatchShape(num_decode_seqs=1, decode_context_tokens=10)
    # tp=2: half the bytes; two ring all-reduces per layer of 1 token * 8 hidden * 2 B
    mem2 = (1e9 + 500 * 11) / 5e11
    comm = 2 * 2 * PARAMS.allreduce_latency_s + 2 * 2 * (2 * 1 / 2) * 8 * 2 / 1e11
    assert t2.step_time_s(shape) == pytest.approx(mem2 + comm + 0.001)
    assert t2.step_time_s(shape) < t1.step_time_s(shape)
    assert t1.name == "roofline"


def test_calibrated_fit_recovers_known_coefficients(tmp_path: Path) -> None:
    # points generated from t = 0.01 + 1e-5 T + 1e-9 T^2 and t = 0.005 + 1e-4 b + 2e-7 ctx
    pre = [(t, 0.01 + 1e-5 * t + 1e-9 * t * t) for t in (128, 512, 1024, 4096, 8192)]
    dec = [
        (b, c, 0.005 + 1e-4 * b + 2e-7 * c)
        for b, c in ((1, 1000), (8, 9000), (32, 20000), (64, 150000), (128, 90000))
    ]
    path = tmp_path / "profile.json"
    path.write_text(
        json.dumps(
            {
                "name": "toy-h100",
                "model_id": "toy",
                "gpu": "H100",
                "engine": "vllm 0.x (made-up points for the test)",
                "prefill_points": pre,
                "decode_points": dec,
            }
        )
    )
    timing = CalibratedTiming(CalibrationProfile.load(path))
    assert timing.name == "calibrated:toy-h100"
    assert timing.prefill_coef == pytest.approx((0.01, 1e-5, 1e-9), rel=1e-6)
    assert timing.decode_coef == pytest.approx((0.005, 1e-4, 2e-7), rel=1e-6)
    assert timing.decode_time_s(10, 5000) == pytest.approx(0.005 + 1e-3 + 1e-3)


def test_bad_profile_is_one_line_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x"}')
    with pytest.raises(ConfigError, match="timing profile"):
        CalibrationProfile.load(path)


def test_roofline_reads_only_the_experts_a_step_routes_to() -> None:
    """4 routed experts of 0.25e9 B each, 1 per token: 2 decode tokens touch on average
    4 * (1 - (3/4)^2) = 1.75 experts (uniform routing), so the step reads 1e9 dense bytes +
    0.4375e9 expert bytes + KV 1000 B * (1000 context + 2 new)."""
    moe = ModelCost(
        model_id="toy-moe",
        num_layers=2,
        hidden_size=8,
        num_attention_heads=2,
        head_dim=4,
        num_active_params=1e9,
        weights_bytes=2e9,
        kv_bytes_per_token=1000.0,
        expert_weights_bytes=1e9,
        num_experts=4,
        num_experts_per_tok=1,
    )
    t = RooflineTiming(moe, GPU, params=PARAMS)
    shape = BatchShape(num_decode_seqs=2, decode_context_tokens=1000)
    assert t.step_time_s(shape) == pytest.approx((1e9 + 0.4375e9 + 1000 * 1002) / 5e11 + 0.001)
    # a large batch touches every expert: all 2e9 bytes
    big = BatchShape(num_decode_seqs=200, decode_context_tokens=0)
    assert t.step_time_s(big) == pytest.approx((2e9 + 1000 * 200) / 5e11 + 0.001)


def test_gpt_oss_is_priced_as_moe_not_dense() -> None:
    """gpt-oss-120b (config: 36 layers, hidden 2880, intermediate_size 2880 per expert, 128
    local experts, 4 per token, experts in mxfp4). Routed expert parameters by hand:
    36 * 128 * (2880 * 5760 + 2880 * 2880); mxfp4 stores 0.5 B a weight plus a 1-byte scale per
    32 (17/32 B). Before the fix the reader looked only for moe_intermediate_size and priced
    all 117B parameters as active."""
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.capacity.planner import make_plan
    from kvbudget.sim.fromplan import model_cost
    from kvbudget.spec.resolve import resolve_model

    spec = resolve_model("openai/gpt-oss-120b").spec
    assert spec is not None
    plan = make_plan(PlanRequest(model="openai/gpt-oss-120b", gpu="H200", max_model_len=4096), spec)
    cost = model_cost(spec, plan)
    routed = 36 * 128 * (2880 * 5760 + 2880 * 2880)
    assert plan.weights.num_params is not None
    assert plan.weights.num_params - cost.num_active_params == routed * (1 - 4 / 128)
    assert cost.expert_weights_bytes == routed * 17 / 32
    assert (cost.num_experts, cost.num_experts_per_tok) == (128, 4)
