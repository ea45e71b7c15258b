"""Acceptance predictions on the llama.cpp slot engine: prompt lengths from the server, the slot
settings from the profile, timings worked by hand from the profile's coefficients."""

from __future__ import annotations

import pytest

from kvbudget.accept.targets.slots import (
    SlotsPredictionTarget,
    engine_behaviour,
    fit_prompt_lengths,
    is_llamacpp_profile,
)
from kvbudget.records import RequestRecord
from kvbudget.sim.timing import CalibrationProfile, StepFit
from kvbudget.workload.request import PlannedRequest


def profile(
    engine: str = "llama.cpp b1-0c1e570",
    *,
    overhead_s: float = 0.01,
    per_token_s: float = 0.001,
    request_overhead_s: float = 0.005,
    settings: dict[str, int | float | str | bool] | None = None,
) -> CalibrationProfile:
    return CalibrationProfile(
        name="hand",
        model_id="tiny",
        gpu="cpu",
        engine=engine,
        prefill_points=[(16, 0.03), (64, 0.08), (256, 0.27)],
        decode_points=[(1, 100, 0.01), (2, 200, 0.01), (4, 400, 0.01)],
        fit=StepFit(
            step_overhead_s=overhead_s,
            prefill_per_token_s=per_token_s,
            prefill_per_pair_s=0.0,
            decode_per_seq_s=0.0,
            decode_per_context_token_s=0.0,
        ),
        engine_settings=settings
        if settings is not None
        else {"num_slots": 2, "n_ctx_slot": 1024, "n_batch": 2048, "n_ubatch": 512},
        request_overhead_s=request_overhead_s,
        valid_ranges={"prompt_tokens": (16, 256), "batch_size": (1, 2)},
    )


def planned(rid: str, ids: tuple[int, ...], out: int = 4, shared: int = 0) -> PlannedRequest:
    return PlannedRequest(rid, 0.0, ids, out, cell_id="short/single", shared_prefix_tokens=shared)


def measured(rid: str, prompt_tokens: int | None) -> RequestRecord:
    return RequestRecord(
        request_id=rid, source="measured", status="ok", prompt_tokens=prompt_tokens
    )


def test_llamacpp_profile_is_recognised_by_its_engine() -> None:
    assert is_llamacpp_profile(profile())
    assert not is_llamacpp_profile(profile("vllm 0.11.0"))
    assert not is_llamacpp_profile(profile("kvbudget-serve"))
    assert engine_behaviour(profile()) == (
        "llama.cpp slots (2 x 1024 cells, n_batch 2048, n_ubatch 512)"
    )


def test_prompts_are_stretched_to_the_server_counts_keeping_shared_prefixes() -> None:
    a = planned("a", (1, 2, 3, 4), shared=2)
    b = planned("b", (1, 2, 5, 6), shared=2)
    out = fit_prompt_lengths([a, b], {"a": 6, "b": 6})
    # ratio 6 / 4 = 1.5; position i takes planned token floor(i / 1.5): 0 0 1 2 2 3
    assert out[0].prompt_token_ids == (1, 1, 2, 3, 3, 4)
    assert out[1].prompt_token_ids == (1, 1, 2, 5, 5, 6)
    assert out[0].shared_prefix_tokens == 3  # 2 planned shared tokens x 1.5


def test_prompts_are_cut_or_padded_to_the_exact_server_count() -> None:
    reqs = [planned(r, (7, 8, 9, 10)) for r in ("a", "b", "c", "d")]
    # median of 8/4, 8/4, 9/4 and (no count) -> 2.0
    out = fit_prompt_lengths(reqs, {"a": 8, "b": 8, "c": 9})
    assert [o.prompt_tokens for o in out] == [8, 8, 9, 8]  # d: round(4 x 2.0)
    assert out[0].prompt_token_ids == (7, 7, 8, 8, 9, 9, 10, 10)
    pad = out[2].prompt_token_ids[8]
    assert out[2].prompt_token_ids[:8] == out[0].prompt_token_ids
    assert pad not in {7, 8, 9, 10} and pad < 0  # a filler token, unique to the request
    short = fit_prompt_lengths([planned("e", (7, 8, 9, 10))], {"e": 3})
    # ratio 0.75: positions 0 1 2 take planned tokens floor(i / 0.75) = 0 1 2
    assert short[0].prompt_token_ids == (7, 8, 9)


def test_without_server_counts_prompts_are_unchanged() -> None:
    reqs = [planned("a", (1, 2, 3))]
    assert fit_prompt_lengths(reqs, {}) == reqs


def test_cell_is_predicted_with_the_server_prompt_length_and_the_profile_timing() -> None:
    prof = profile()
    target = SlotsPredictionTarget(prof, {"short/single#0/0": measured("short/single#0/0", 30)})
    req = planned("short/single#0/0", tuple(range(100, 120)), out=4)
    unsent = planned("short/single#0/1", tuple(range(200, 220)), out=4)
    run = target.run_cell(
        [req, unsent], cell_id="short/single", closed_loop_concurrency=1, duration_s=2.0
    )
    # only the request the measured cell sent is replayed
    (rec,) = run.records
    assert rec.source == "simulated" and rec.prompt_tokens == 30
    # prompt: one ubatch of 30 tokens = 0.01 + 30 x 0.001 = 0.040 s, plus the request overhead
    # 0.005 s (not 0.01 + 20 x 0.001 from kvbudget's own count of 20 tokens)
    assert rec.ttft_s == pytest.approx(0.045)
    # each decode step = 0.01 s overhead (no decode coefficients); 4 tokens -> 3 gaps
    assert rec.tpot_s == pytest.approx(0.01)
    # peak KV: 30 prompt + 3 fed-back tokens in one of 2 x 1024 cells
    (sample,) = run.samples
    assert sample.value == pytest.approx(33 / 2048)
    # 30 prompt tokens are inside [16, 256]; batch 1 inside [1, 2]
    assert target.warnings["short/single"] == []
    assert "engine behaviour: llama.cpp slots (2 x 1024 cells" in target.info.label
    assert target.info.source == "simulated"


def test_prompt_beyond_the_calibrated_range_is_flagged_and_too_long_is_refused() -> None:
    prof = profile()
    rid = "long/single#0/0"
    target = SlotsPredictionTarget(prof, {rid: measured(rid, 1500)})
    run = target.run_cell(
        [planned(rid, tuple(range(1000)))],
        cell_id="long/single",
        closed_loop_concurrency=1,
        duration_s=2.0,
    )
    # 1500 server tokens do not fit a slot of 1024 cells: llama.cpp answers 400
    (rec,) = run.records
    assert rec.status == "error" and rec.http_status == 400
    assert run.capacity_error is not None and "1024" in run.capacity_error
    assert any("prompt_tokens 1500" in w for w in target.warnings["long/single"])


def test_slots_keep_their_prompts_from_one_cell_to_the_next() -> None:
    """One engine serves the run: a prefix cached by the previous cell is reused, as on the
    server (the slot whose cache shares the longest prefix is taken, llama.cpp get_available_slot)."""
    prof = profile(request_overhead_s=0.0)
    first, second = "short/single#0/0", "short/normal#0/0"
    target = SlotsPredictionTarget(prof, {first: measured(first, 50), second: measured(second, 50)})
    system = tuple(range(1000, 1040))  # 40 shared tokens
    a = planned(first, system + tuple(range(10)), out=2)
    b = planned(second, system + tuple(range(500, 510)), out=2)
    run_a = target.run_cell([a], cell_id="short/single", closed_loop_concurrency=1, duration_s=2)
    run_b = target.run_cell([b], cell_id="short/normal", closed_loop_concurrency=1, duration_s=2)
    (rec_a,), (rec_b,) = run_a.records, run_b.records
    assert rec_a.cached_tokens == 0 and rec_b.cached_tokens == 40
    # cold: 0.01 + 50 x 0.001; warm: only the 10 new tokens are evaluated: 0.01 + 10 x 0.001
    assert rec_a.ttft_s == pytest.approx(0.06)
    assert rec_b.ttft_s == pytest.approx(0.02)
    # the second cell starts where the first ended: 0.06 prefill + 1 decode step of 0.01
    assert rec_b.sent_s == pytest.approx(0.07)
    assert run_b.duration_s == pytest.approx(0.03)
