"""llama.cpp-style slots: scheduling worked out by hand with a constant step time."""

from __future__ import annotations

import pytest

from kvbudget.errors import ConfigError
from kvbudget.sim.slots import SlotConfig, SlotRequest
from kvbudget.sim.slots_replica import run_slots
from kvbudget.sim.timing import FixedTiming

STEP = FixedTiming(step_s=0.01)  # every ubatch costs 10 ms, whatever it holds


def req(rid: str, prompt: tuple[int, ...], out: int, at: float = 0.0) -> SlotRequest:
    return SlotRequest(rid, at, prompt, out)


def test_third_request_is_deferred_until_a_slot_frees() -> None:
    cfg = SlotConfig(num_slots=2, n_ctx_slot=256)
    reqs = [req(f"r{i}", tuple(range(100 * i, 100 * i + 10)), 3) for i in range(3)]
    results, stats = run_slots(cfg, STEP, reqs)
    # step 1 (0-10 ms): both prompts in one ubatch -> first tokens at 10 ms; steps 2-3 decode;
    # r2 starts at 30 ms: prompt 30-40, decode 40-50, 50-60
    assert [r.first_token_s for r in results] == pytest.approx([0.01, 0.01, 0.04])
    assert [r.done_s for r in results] == pytest.approx([0.03, 0.03, 0.06])
    assert results[2].start_s == pytest.approx(0.03)
    assert stats.num_deferred_peak == 1
    assert all(r.output_tokens == 3 for r in results)


def test_prompt_splits_into_ubatches_and_batches() -> None:
    # 10 prompt tokens, n_ubatch 4: three ubatches (4, 4, 2) in one iteration -> 30 ms
    cfg = SlotConfig(num_slots=1, n_ctx_slot=256, n_ubatch=4)
    (r,), stats = run_slots(cfg, STEP, [req("a", tuple(range(10)), 1)])
    assert r.first_token_s == pytest.approx(0.03)
    assert stats.num_ubatches == 3 and stats.num_steps == 1
    # 20 prompt tokens, n_batch 8: iterations of 8, 8, 4 tokens, one ubatch each -> 30 ms
    cfg = SlotConfig(num_slots=1, n_ctx_slot=256, n_batch=8)
    (r,), stats = run_slots(cfg, STEP, [req("b", tuple(range(20)), 1)])
    assert r.first_token_s == pytest.approx(0.03)
    assert stats.num_steps == 3


def test_prompt_reuse_by_longest_common_prefix() -> None:
    cfg = SlotConfig(num_slots=2, n_ctx_slot=256)
    p = tuple(range(1, 11))
    reqs = [
        req("first", p, 2, 0.0),
        req("other", tuple(range(500, 510)), 2, 0.0),
        req("extends", (*p, 77, 78, 79, 80, 81), 2, 1.0),
        req("repeat", tuple(range(500, 510)), 2, 2.0),
    ]
    results, _ = run_slots(cfg, STEP, reqs)
    by_id = {r.request_id: r for r in results}
    assert by_id["first"].cached_tokens == 0
    # the 10-token prefix is in the slot that served "first"
    assert by_id["extends"].slot == by_id["first"].slot
    assert by_id["extends"].cached_tokens == 10
    # a full repeat still evaluates one prompt token
    assert by_id["repeat"].slot == by_id["other"].slot
    assert by_id["repeat"].cached_tokens == 9


def test_no_reuse_without_cache_prompt() -> None:
    cfg = SlotConfig(num_slots=1, n_ctx_slot=256, cache_prompt=False)
    p = tuple(range(1, 11))
    results, _ = run_slots(cfg, STEP, [req("a", p, 1, 0.0), req("b", p, 1, 1.0)])
    assert results[1].cached_tokens == 0


def test_prompt_longer_than_a_slot_is_refused_and_output_capped() -> None:
    cfg = SlotConfig(num_slots=1, n_ctx_slot=16)
    results, _ = run_slots(
        cfg, STEP, [req("long", tuple(range(16)), 4), req("fits", tuple(range(12)), 10)]
    )
    assert results[0].status == "error" and "16 cells" in (results[0].error or "")
    assert results[1].status == "ok"
    assert results[1].output_tokens == 16 - 12  # stops at the slot's context


def test_closed_loop_sends_the_next_request_when_one_ends() -> None:
    cfg = SlotConfig(num_slots=4, n_ctx_slot=256)
    reqs = [req(f"r{i}", tuple(range(100 * i, 100 * i + 10)), 2) for i in range(3)]
    results, _ = run_slots(cfg, STEP, reqs, concurrency=1)
    # each request: prompt step + one decode step = 20 ms, back to back
    assert [r.arrival_s for r in results] == pytest.approx([0.0, 0.02, 0.04])
    assert [r.done_s for r in results] == pytest.approx([0.02, 0.04, 0.06])


def test_decode_and_prompt_tokens_share_a_priced_ubatch() -> None:
    # per-token pricing: 1 ms per token in the step, on top of 10 ms
    timing = FixedTiming(step_s=0.01, per_token_s=0.001)
    cfg = SlotConfig(num_slots=2, n_ctx_slot=256)
    reqs = [req("a", tuple(range(5)), 3, 0.0), req("b", tuple(range(100, 108)), 1, 0.015)]
    results, stats = run_slots(cfg, timing, reqs)
    # a: prompt 5 tokens -> 15 ms. At 15 ms b arrives: the step holds a's decode token and
    # b's 8 prompt tokens -> 10 + 9 = 19 ms, ending at 34 ms
    assert results[0].first_token_s == pytest.approx(0.015)
    assert results[1].first_token_s == pytest.approx(0.034)
    assert results[0].token_times_s[1] == pytest.approx(0.034)
    assert stats.peak_cells_in_use == (5 + 1) + 8


def test_bad_config_is_refused() -> None:
    with pytest.raises(ConfigError, match="n_ubatch"):
        SlotConfig(num_slots=1, n_ctx_slot=16, n_ubatch=0)


def test_staggered_clients_and_turnaround() -> None:
    # client 1 arrives 1 ms after client 0, while client 0's prompt iteration (0-10 ms) runs:
    # it waits for the next iteration (10-20 ms), which also carries client 0's decode token
    cfg = SlotConfig(num_slots=2, n_ctx_slot=256)
    reqs = [req(f"r{i}", tuple(range(100 * i, 100 * i + 10)), 2) for i in range(3)]
    results, _ = run_slots(cfg, STEP, reqs, concurrency=2, stagger_s=0.001, turnaround_s=0.005)
    assert results[0].first_token_s == pytest.approx(0.01)
    assert results[1].arrival_s == pytest.approx(0.001)
    assert results[1].first_token_s == pytest.approx(0.02)
    # r0 ends at 20 ms; its client's next request arrives 5 ms later, during the 20-30 ms
    # iteration (r1's decode), so it starts at 30 ms and gets its first token at 40 ms
    assert results[0].done_s == pytest.approx(0.02)
    assert results[2].arrival_s == pytest.approx(0.025)
    assert results[2].first_token_s == pytest.approx(0.04)


def test_planned_workload_becomes_simulated_records() -> None:
    from kvbudget.sim.slots_records import run_planned
    from kvbudget.workload.request import PlannedRequest

    cfg = SlotConfig(num_slots=1, n_ctx_slot=64)
    planned = [
        PlannedRequest("a", 0.0, tuple(range(10)), 3, cell_id="short/single"),
        PlannedRequest("b", 0.0, tuple(range(100, 110)), 2, cell_id="short/single"),
        PlannedRequest("c", 0.0, tuple(range(70)), 2),  # longer than the slot: refused
    ]
    records, _ = run_planned(cfg, STEP, planned)
    a, b, c = records
    assert all(r.source == "simulated" for r in records)
    # a: prompt 0-10 ms, tokens at 10, 20, 30 ms; b waits for the only slot until 30 ms
    assert a.ttft_s == pytest.approx(0.01) and a.tpot_s == pytest.approx(0.01)
    assert b.queue_s == pytest.approx(0.03) and b.ttft_s == pytest.approx(0.04)
    assert b.cell_id == "short/single" and b.output_tokens == 2
    assert c.status == "error" and c.error_kind == "http_status" and c.http_status == 400


def test_a_client_cancel_is_a_shorter_output_recorded_cancelled() -> None:
    # the measured client (kvbudget.load.client) records a request it cancelled after
    # cancel_after_tokens streamed tokens as status "cancelled", error_kind "cancelled"
    from kvbudget.sim.slots_records import run_planned
    from kvbudget.workload.request import PlannedRequest

    cfg = SlotConfig(num_slots=1, n_ctx_slot=64)
    planned = [
        PlannedRequest("a", 0.0, tuple(range(10)), 5, cancel_after_tokens=2),
        PlannedRequest("b", 0.0, tuple(range(100, 110)), 2, cancel_after_tokens=2),
    ]
    a, b = run_planned(cfg, STEP, planned)[0]
    # a: prompt 0-10 ms (token 1), decode 10-20 ms (token 2), then the client is gone
    assert (a.status, a.error_kind, a.output_tokens) == ("cancelled", "cancelled", 2)
    assert a.done_s == pytest.approx(0.02)
    # b asked for 2 tokens and cancels at 2: it finished on its own (the engine's rule)
    assert (b.status, b.output_tokens) == ("ok", 2)
    assert b.first_token_s == pytest.approx(0.03)
