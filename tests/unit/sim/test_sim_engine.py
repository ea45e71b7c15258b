"""EngineCore API (team brief, interface 7): timings and counts worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.errors import ConfigError
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.timing import FixedTiming
from kvbudget.workload.request import PlannedRequest

from .helpers_sim import make_config, make_engine, make_request, run_to_end


def test_single_request_prefill_then_decode() -> None:
    core = make_engine(step_s=0.01)
    core.add_request(make_request("a", 10, 3))
    results = []
    now = 0.0
    while core.has_work():
        r = core.step(now)
        now += r.duration_s
        results.append(r)
    # one prefill step emits token 0, then two decode steps: 3 steps of 10 ms
    assert len(results) == 3
    assert now == pytest.approx(0.03)
    outs = [o for r in results for o in r.outputs]
    assert [o.token_index for o in outs] == [0, 1, 2]
    assert [o.finished for o in outs] == [False, False, True]
    assert outs[-1].finish_reason == "length"
    assert results[0].num_scheduled_tokens == 10
    assert results[1].num_scheduled_tokens == 1
    st = core.stats()
    assert st.prompt_tokens == 10 and st.generation_tokens == 3
    assert st.num_free_blocks == st.num_total_blocks - 1  # only the null block is held


def test_chunked_prefill_respects_token_budget() -> None:
    core = make_engine(max_num_batched_tokens=32)
    core.add_request(make_request("a", 100, 2))
    sizes = []
    now = 0.0
    first_token_step = None
    while core.has_work():
        r = core.step(now)
        now += r.duration_s
        sizes.append(r.num_scheduled_tokens)
        if r.outputs and first_token_step is None:
            first_token_step = len(sizes)
    # 100 prompt tokens in chunks of 32: 32, 32, 32, 4 -> first token after step 4
    assert sizes == [32, 32, 32, 4, 1]
    assert first_token_step == 4


def test_max_num_seqs_caps_running() -> None:
    core = make_engine(max_num_seqs=2, max_num_batched_tokens=1000)
    for i in range(5):
        core.add_request(make_request(f"r{i}", 8, 4))
    core.step(0.0)
    st = core.stats()
    assert st.num_running == 2 and st.num_waiting == 3


def test_abort_frees_blocks_now() -> None:
    core = make_engine()
    core.add_request(make_request("a", 40, 50))
    core.step(0.0)
    # 40 prompt tokens with block_size 4 -> 10 blocks held
    assert core.stats().num_free_blocks == 64 - 1 - 10
    assert core.abort_request("a") is True
    assert core.stats().num_free_blocks == 63
    assert not core.has_work()
    assert core.abort_request("a") is False


def test_reset_prefix_cache_only_when_idle() -> None:
    core = make_engine()
    core.add_request(make_request("a", 16, 5))
    core.step(0.0)
    assert core.reset_prefix_cache() is False
    run_to_end(core)
    assert core.reset_prefix_cache() is True
    # after the reset the same prompt finds nothing
    core.add_request(make_request("b", 16, 2))
    core.step(1.0)
    assert core.stats().prefix_cache_hits_tokens == 0


def test_prefix_hits_counted_in_tokens() -> None:
    core = make_engine(max_num_seqs=4, max_num_batched_tokens=64)
    shared = tuple(range(1, 13))  # 12 tokens = 3 blocks of 4
    for i in range(3):
        core.add_request(make_request(f"r{i}", (*shared, 100 + i, 200 + i, 300), 2))
    run_to_end(core)
    st = core.stats()
    # each prompt is 15 tokens; r1 and r2 find the 3 shared blocks (12 tokens) cached
    assert st.prefix_cache_queries_tokens == 45
    assert st.prefix_cache_hits_tokens == 24
    assert st.prefix_cache_hits_blocks == 6


def test_accepts_planned_request_and_rejects_oversize() -> None:
    core = EngineCore(
        make_config(num_gpu_blocks=8, block_size=4, max_model_len=64),
        FixedTiming(),
        np.random.default_rng(1),
    )
    core.add_request(
        PlannedRequest(request_id="p", arrival_s=0.0, prompt_token_ids=(1, 2, 3), output_tokens=2)
    )
    with pytest.raises(ConfigError, match="KV blocks"):
        core.add_request(make_request("big", 40, 2))  # 41 tokens -> 11 blocks > 7 usable
    with pytest.raises(ConfigError, match="max_model_len"):
        core.add_request(make_request("long", 60, 10))
    with pytest.raises(ConfigError, match="already"):
        core.add_request(make_request("p", 3, 2))
