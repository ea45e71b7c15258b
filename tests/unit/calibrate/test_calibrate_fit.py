"""The fit recovers known coefficients from synthetic points; out-of-range use is flagged."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvbudget.calibrate.fit import decode_observation, fit_step_model, prefill_observation
from kvbudget.errors import ConfigError
from kvbudget.sim.timing import CalibratedTiming, CalibrationProfile

# the "engine" of these tests: coefficients chosen by hand
OVERHEAD_S = 0.004
PREFILL_PER_TOKEN_S = 2e-4
PREFILL_PER_PAIR_S = 3e-8
DECODE_PER_SEQ_S = 1e-3
DECODE_PER_CTX_S = 2e-7
N_UBATCH = 512


def true_prefill_s(new: int, cached: int) -> float:
    # worked independently of the code: one overhead per ubatch, per-token cost, and the
    # attention pairs sum_{i=1..new} (cached + i) = new * cached + new * (new + 1) / 2
    steps = math.ceil(new / N_UBATCH)
    pairs = new * cached + new * (new + 1) / 2
    return OVERHEAD_S * steps + PREFILL_PER_TOKEN_S * new + PREFILL_PER_PAIR_S * pairs


def true_decode_s(batch: int, start_ctx: int, steps: int) -> float:
    total = 0.0
    for j in range(steps):  # step j: every sequence attends over start_ctx + j tokens
        total += OVERHEAD_S + DECODE_PER_SEQ_S * batch + DECODE_PER_CTX_S * batch * (start_ctx + j)
    return total


def synthetic(noise: float, seed: int = 7) -> list:
    rng = np.random.default_rng(seed)
    obs = []
    for new in (16, 64, 128, 256, 512, 1024, 1536):
        for cached in (0, 512):
            t = true_prefill_s(new, cached) * (1 + noise * rng.standard_normal())
            obs.append(prefill_observation(new, cached, t, n_ubatch=N_UBATCH))
    for batch in (1, 2, 4, 8):
        for start in (32, 512, 1024):
            t = true_decode_s(batch, start, 31) * (1 + noise * rng.standard_normal())
            obs.append(decode_observation(batch, start, 31, t))
    return obs


def test_fit_recovers_known_coefficients_exactly_without_noise() -> None:
    result = fit_step_model(synthetic(0.0))
    f = result.fit
    assert f.step_overhead_s == pytest.approx(OVERHEAD_S, rel=1e-6)
    assert f.prefill_per_token_s == pytest.approx(PREFILL_PER_TOKEN_S, rel=1e-6)
    assert f.prefill_per_pair_s == pytest.approx(PREFILL_PER_PAIR_S, rel=1e-6)
    assert f.decode_per_seq_s == pytest.approx(DECODE_PER_SEQ_S, rel=1e-6)
    assert f.decode_per_context_token_s == pytest.approx(DECODE_PER_CTX_S, rel=1e-6)
    assert result.residuals["max_rel"] < 1e-9


def test_fit_with_2pct_noise_recovers_the_large_terms_within_10pct() -> None:
    # stated tolerance: with 2 % multiplicative noise, the terms that dominate their points
    # (per-token prefill, per-seq decode, the overhead) come back within 10 %, and the fitted
    # model predicts every noiseless point within 5 %
    result = fit_step_model(synthetic(0.02))
    f = result.fit
    assert f.prefill_per_token_s == pytest.approx(PREFILL_PER_TOKEN_S, rel=0.10)
    assert f.decode_per_seq_s == pytest.approx(DECODE_PER_SEQ_S, rel=0.10)
    assert f.step_overhead_s == pytest.approx(OVERHEAD_S, rel=0.10)
    for new, cached in ((100, 0), (1000, 300)):
        pred = result.predict_s(prefill_observation(new, cached, 1.0, n_ubatch=N_UBATCH))
        assert pred == pytest.approx(true_prefill_s(new, cached), rel=0.05)
    pred = result.predict_s(decode_observation(3, 700, 20, 1.0))
    assert pred == pytest.approx(true_decode_s(3, 700, 20), rel=0.05)
    assert 0 < result.residuals["rms_rel"] < 0.05


def test_coefficients_are_never_negative() -> None:
    # decode time falling with context would need a negative coefficient: nnls clamps it to 0
    obs = synthetic(0.0)
    obs += [decode_observation(1, ctx, 10, 0.05 - ctx * 1e-5) for ctx in (100, 1000, 2000)]
    f = fit_step_model(obs).fit
    assert min(f.model_dump().values()) >= 0.0


def test_fit_needs_both_kinds_of_points() -> None:
    only_prefill = [prefill_observation(n, 0, 0.01 * n, n_ubatch=512) for n in range(1, 10)]
    with pytest.raises(ConfigError, match="both prefill and decode"):
        fit_step_model(only_prefill)


def test_valid_ranges_cover_the_points() -> None:
    r = fit_step_model(synthetic(0.0)).valid_ranges
    assert r["prompt_tokens"] == (16.0, 1536.0 + 512.0)
    assert r["batch_size"] == (1.0, 8.0)
    # prefill context reaches 1536 + 512; decode context 1024 + 31
    assert r["context_tokens"] == (16.0, max(1536.0 + 512.0, 1024.0 + 31.0))


def make_profile(**ranges: tuple[float, float]) -> CalibrationProfile:
    fit = fit_step_model(synthetic(0.0))
    return CalibrationProfile(
        name="t",
        model_id="m",
        gpu="cpu",
        engine="test",
        prefill_points=[(16, 0.01), (64, 0.02), (128, 0.03)],
        decode_points=[(1, 10, 0.01), (2, 20, 0.02), (4, 40, 0.03)],
        fit=fit.fit,
        valid_ranges=dict(ranges) or fit.valid_ranges,
    )


def test_out_of_range_use_is_flagged_and_in_range_is_not() -> None:
    profile = make_profile()
    assert profile.range_warnings({"prompt_tokens": 1000, "batch_size": 4}) == []
    warnings = profile.range_warnings({"prompt_tokens": 4000, "batch_size": 16})
    assert len(warnings) == 2
    assert "prompt_tokens 4000 is outside the calibrated range [16, 2048]" in warnings[1]
    assert "batch_size 16 is outside the calibrated range [1, 8]" in warnings[0]


def test_calibrated_timing_uses_the_stored_fit() -> None:
    timing = CalibratedTiming(make_profile())
    # a lone decode step of 2 sequences at total context 600: overhead + 2 * per-seq + 600 * ctx
    expected = OVERHEAD_S + 2 * DECODE_PER_SEQ_S + 600 * DECODE_PER_CTX_S
    assert timing.decode_time_s(2, 600) == pytest.approx(expected, rel=1e-6)
    # a lone prefill of 100 tokens (one ubatch) after 0 cached
    assert timing.prefill_time_s(100) == pytest.approx(true_prefill_s(100, 0), rel=1e-6)


def test_profile_round_trips_through_json() -> None:
    profile = make_profile()
    again = CalibrationProfile.model_validate_json(profile.model_dump_json())
    assert again == profile


def test_a_slow_outlier_among_repeats_does_not_move_the_fit() -> None:
    # three repeats of every point; one repeat of one point is 10x slower (a busy CPU)
    obs = synthetic(0.0) * 3
    obs[0] = prefill_observation(16, 0, 10 * true_prefill_s(16, 0), n_ubatch=N_UBATCH)
    f = fit_step_model(obs).fit
    assert f.prefill_per_token_s == pytest.approx(PREFILL_PER_TOKEN_S, rel=1e-6)
    assert f.step_overhead_s == pytest.approx(OVERHEAD_S, rel=1e-6)
