"""Calibrating against vLLM: its prefill-time histogram, per-request prefix scrapes, the
prompt-id range of a small vocabulary, and the paged-engine prediction (worked by hand)."""

from __future__ import annotations

import pytest

from kvbudget.calibrate.measure import ProbeResult, observations, request_overhead_s
from kvbudget.calibrate.predict import CellLoad
from kvbudget.calibrate.predict_paged import is_paged_profile, predict_paged_cell
from kvbudget.calibrate.series import Probe, SeriesSpec, plan_series, token_range
from kvbudget.load.client import StreamOutcome
from kvbudget.load.prometheus import parse_exposition
from kvbudget.sim.timing import CalibrationProfile
from tests.unit.calibrate.test_calibrate_predict import profile


def outcome(sent: float, first: float, prompt_tokens: int | None = None) -> StreamOutcome:
    out = StreamOutcome(request_id="x", sent_s=sent)
    out.chunk_times_s = [first]
    out.first_token_s = first
    out.usage_prompt_tokens = prompt_tokens
    return out


def test_prompt_ids_stay_inside_a_small_served_vocabulary() -> None:
    assert token_range(None) == (1000, 30000)
    assert token_range(50000) == (1000, 30000)
    assert token_range(2048) == (1000, 2048)  # the vLLM test model's vocabulary
    assert token_range(1000) == (500, 1000)
    spec = SeriesSpec(max_prompt_tokens=256, max_batch=2, repeats=1, vocab_size=2048)
    ids = [t for probe in plan_series(spec) for p in probe.prompts for t in p]
    assert min(ids) >= 1000 and max(ids) < 2048


def test_vllm_prefill_time_histogram_is_mapped() -> None:
    text = (
        "# TYPE vllm:request_prefill_time_seconds histogram\n"
        'vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 0.5\n'
        'vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 2.0\n'
        'vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0\n'
    )
    got = {s.name: s.value for s in parse_exposition(text, 0.0) if not s.labels}
    assert got == {"engine_prefill_seconds_sum": 0.5, "engine_prefill_seconds_count": 2.0}


def test_prefill_time_is_preferred_to_ttft() -> None:
    probe = Probe("prefill", ((1,) * 64,), 2, "p")
    deltas = {
        "engine_ttft_seconds_sum": 0.09,
        "engine_ttft_seconds_count": 1.0,
        "engine_prefill_seconds_sum": 0.07,
        "engine_prefill_seconds_count": 1.0,
    }
    res = ProbeResult(probe, (outcome(1.0, 1.1),), deltas)
    (obs,) = observations([res], n_ubatch=2048)
    assert obs.source == "metrics" and obs.seconds == pytest.approx(0.07)
    # client TTFT 100 ms - engine prefill 70 ms
    assert request_overhead_s([res]) == pytest.approx(0.03)


def test_prefix_probe_reads_each_request_and_the_engine_hit_count() -> None:
    base, ext = (5,) * 300, (5,) * 300 + (6,) * 100
    probe = Probe("prefix", (base, ext), 2, "prefix 300+100")
    per = (
        {
            "engine_prefill_seconds_sum": 0.2,
            "engine_prefill_seconds_count": 1.0,
            "prefix_cache_hits_tokens": 0.0,
        },
        # vLLM caches full blocks only: 2 blocks of 128 of the 300-token base are hit
        {
            "engine_prefill_seconds_sum": 0.05,
            "engine_prefill_seconds_count": 1.0,
            "prefix_cache_hits_tokens": 256.0,
        },
    )
    outs = (outcome(0.0, 0.21, 300), outcome(0.3, 0.36, 400))
    first, second = observations([ProbeResult(probe, outs, None, per)], n_ubatch=2048)
    assert (first.prefill_tokens, first.seconds) == (300, pytest.approx(0.2))
    assert second.source == "metrics" and second.seconds == pytest.approx(0.05)
    assert second.prefill_tokens == 144  # 400 served tokens - 256 cached
    assert second.prompt_tokens == 400


def vllm_profile() -> CalibrationProfile:
    """The hand profile of test_calibrate_predict (every engine step costs 10 ms, whatever it
    holds) as a vLLM profile: no per-request overhead, the paged engine's settings."""
    return profile().model_copy(
        update={
            "engine": "vllm 0.32.0",
            "request_overhead_s": 0.0,
            "engine_settings": {
                "num_gpu_blocks": 256,
                "block_size": 16,
                "max_model_len": 4096,
                "max_num_batched_tokens": 2048,
                "max_num_seqs": 128,
                "enable_prefix_caching": False,
            },
        }
    )


def test_paged_prediction_chunks_a_long_prompt_by_the_step_budget() -> None:
    profile = vllm_profile()
    assert is_paged_profile(profile)
    # 3000 tokens with a 2048-token budget: chunks 2048 + 952 -> first token after 2 steps
    # (20 ms), then 2 decode steps of 10 ms
    load = CellLoad("long", (tuple(range(3000)),), 3, 1)
    fig, warnings = predict_paged_cell(profile, load)
    assert fig.ttft_p50_s == pytest.approx(0.02)
    assert fig.tpot_p50_s == pytest.approx(0.01)
    assert fig.throughput_tokens_per_s == pytest.approx(3 / 0.04)
    assert "vLLM-style paged blocks" in fig.source
    assert warnings == []


def test_paged_prediction_batches_a_late_arrival_with_a_decode() -> None:
    # r0 at 0 s is prefilled alone (token at 10 ms); r1 (sent 1 ms later) is prefilled in the
    # same step as r0's decode (20 ms) and decodes alone (30 ms)
    load = CellLoad("two", (tuple(range(16)), tuple(range(100, 116))), 2, 2)
    fig, _ = predict_paged_cell(vllm_profile(), load)
    assert fig.num_requests == 2
    assert fig.ttft_p50_s == pytest.approx((0.01 + 0.019) / 2)
    assert fig.tpot_p50_s == pytest.approx(0.01)
    assert not is_paged_profile(vllm_profile().model_copy(update={"engine": "llama.cpp b1"}))
