"""Prediction of a cell from a profile (worked by hand) and the error rows."""

from __future__ import annotations

import pytest

from kvbudget.calibrate.predict import CellLoad, compare, figures, predict_cell, slot_config
from kvbudget.sim.timing import CalibrationProfile, StepFit


def profile(**ranges: tuple[float, float]) -> CalibrationProfile:
    return CalibrationProfile(
        name="hand",
        model_id="m",
        gpu="cpu",
        engine="llama.cpp test",
        prefill_points=[(16, 0.01), (64, 0.01), (128, 0.01)],
        decode_points=[(1, 10, 0.01), (2, 20, 0.01), (4, 40, 0.01)],
        # every step (ubatch) costs 10 ms, whatever it holds
        fit=StepFit(
            step_overhead_s=0.01,
            prefill_per_token_s=0.0,
            prefill_per_pair_s=0.0,
            decode_per_seq_s=0.0,
            decode_per_context_token_s=0.0,
        ),
        request_overhead_s=0.002,
        engine_settings={"num_slots": 2, "n_ctx_slot": 256, "n_batch": 2048, "n_ubatch": 512},
        valid_ranges=dict(ranges),
    )


def test_slot_layout_comes_from_the_profile() -> None:
    cfg = slot_config(profile())
    assert (cfg.num_slots, cfg.n_ctx_slot, cfg.n_batch, cfg.n_ubatch) == (2, 256, 2048, 512)


def test_single_client_cell_worked_by_hand() -> None:
    load = CellLoad("c", (tuple(range(10)), tuple(range(50, 60))), 3, 1)
    fig, warnings = predict_cell(profile(prompt_tokens=(16.0, 512.0)), load)
    # (llama.cpp adds no BOS to token-id prompts: 10 prompt tokens)
    # request 0: prompt step 0-10 ms (first token), decode 10-20, 20-30 ms; TTFT adds 2 ms.
    # request 1 reaches the server 2 ms after request 0 ended: 32 ms; tokens at 42, 52, 62 ms
    assert fig.ttft_p50_s == pytest.approx(0.012)
    assert fig.tpot_p50_s == pytest.approx(0.01)
    assert fig.throughput_tokens_per_s == pytest.approx(6 / 0.062)
    assert fig.source.startswith("simulated (calibrated:hand")
    # 10 prompt tokens is below the calibrated 16: flagged
    assert len(warnings) == 1 and "prompt_tokens 10 is outside" in warnings[0]


def test_error_rows_are_relative_to_the_measurement() -> None:
    measured = figures("measured (x)", [0.1, 0.2], [0.01, 0.03], 100, 10.0)
    predicted = figures("simulated (y)", [0.15, 0.15], [0.02, 0.02], 120, 10.0, 0.5)
    rows = {r.metric: r for r in compare("c", "held-out", measured, predicted)}
    # measured TTFT p50 = 0.15 (midpoint), predicted 0.15 -> 0 %
    assert rows["ttft_p50_s"].rel_error == pytest.approx(0.0)
    # throughput 12 vs 10 tok/s -> +20 %
    assert rows["throughput_tokens_per_s"].rel_error == pytest.approx(0.2)
    # KV usage was not measured: the row says so (no error computed)
    assert rows["peak_kv_usage"].measured is None and rows["peak_kv_usage"].rel_error is None
