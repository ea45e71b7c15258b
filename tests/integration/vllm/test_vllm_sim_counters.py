"""The simulator against vLLM 0.32.0's own prefix-cache and preemption counters (CPU build).

One small pool: ``--num-gpu-blocks-override 16`` blocks of 128 tokens (15 usable: block 0 is
the null block), prefix caching on, ``--max-num-batched-tokens 2048 --max-num-seqs 128`` given
explicitly, so the simulated replica is built from the same numbers, not from guessed defaults.
Prompts are token-id lists, so both engines see identical token sequences.

* Sequential (one request at a time, each waited for): timing cannot blur anything, so the
  simulator's prefix-cache query and hit tokens must EQUAL vLLM's
  (``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` deltas per request),
  through evictions of the 15-block pool.
* Concurrent and preempting (6 requests of 256 shared + 300 own prompt tokens and 200 output
  tokens sent at once: about 42 blocks wanted, 15 available): the request arrivals over HTTP and
  the engine's step boundaries are not the simulator's, so hits and preemption counts are
  compared within a stated tolerance (see ``PREEMPT_TOLERANCE``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.timing import FixedTiming
from kvbudget.workload.request import PlannedRequest

# an engine start takes 30-90 s (minutes on a busy machine): generous per-test limits
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

NUM_BLOCKS = 16
BLOCK_SIZE = 128
MAX_MODEL_LEN = 1536  # 15 usable blocks x 128 = 1920: vLLM refuses 2048 (observed)
MAX_BATCHED = 2048
MAX_SEQS = 128
#: preemption counts: the simulator admits all six at t=0, vLLM admits them as their HTTP
#: requests arrive (a few ms apart, possibly across engine steps), so the victims can differ
PREEMPT_TOLERANCE = 0.5  # relative, on the total preemption count
QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
DONE = "vllm:request_success_total"


def ids(n: int, seed: int) -> list[int]:
    # ids 0 and 1 are the tokenizer's <s> and </s>; everything else is a plain token
    return [int(x) for x in np.random.default_rng(seed).integers(2, 2048, n)]


def replica() -> ReplicaConfig:
    return ReplicaConfig(
        num_gpu_blocks=NUM_BLOCKS,
        block_size=BLOCK_SIZE,
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=MAX_BATCHED,
        max_num_seqs=MAX_SEQS,
        enable_prefix_caching=True,
    )


@pytest.fixture(scope="module")
def small_pool_server(
    vllm: Any, vllm_launcher: Any, tiny_llama: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("vllm-small") / "vllm.log"
    args = ["--enable-prefix-caching", "--num-gpu-blocks-override", str(NUM_BLOCKS)]
    args += ["--max-num-batched-tokens", str(MAX_BATCHED), "--max-num-seqs", str(MAX_SEQS)]
    with vllm_launcher.start_server(
        vllm, tiny_llama, log, args, max_model_len=MAX_MODEL_LEN
    ) as server:
        yield server


def sequence() -> list[list[int]]:
    a, x, b, f = ids(300, 1), ids(200, 2), ids(1000, 3), ids(256, 4)
    five = [ids(600, 10 + i) for i in range(4)]
    return [a, a, a + x, b, f, f, a + x, *five, five[3], a + x, b, five[0], five[3]]


def simulate(prompts: list[list[int]], output_tokens: int, *, at_once: bool) -> EngineCore:
    core = EngineCore(replica(), FixedTiming(step_s=0.01), np.random.default_rng(0))
    now = 0.0

    def drain() -> None:
        nonlocal now
        while core.has_work():
            now += core.step(now).duration_s or 1e-3

    for i, p in enumerate(prompts):
        core.add_request(PlannedRequest(f"r{i}", now, tuple(p), output_tokens=output_tokens))
        if not at_once:
            drain()
    drain()
    return core


def test_sequential_prefix_cache_tokens_equal_vllm(small_pool_server: Any) -> None:
    server = small_pool_server
    server.post_json("/reset_prefix_cache", {})
    prompts = sequence()
    measured = []
    for p in prompts:
        before = server.metrics()
        server.complete(p, max_tokens=2)
        after = server.settled_metrics(DONE, before.get(DONE, 0.0) + 1)
        measured.append((int(after[QUERIES] - before[QUERIES]), int(after[HITS] - before[HITS])))
    simulated = []
    core = EngineCore(replica(), FixedTiming(step_s=0.01), np.random.default_rng(0))
    now = 0.0
    for i, p in enumerate(prompts):
        s0 = core.stats()
        core.add_request(PlannedRequest(f"r{i}", now, tuple(p), output_tokens=2))
        while core.has_work():
            now += core.step(now).duration_s or 1e-3
        s1 = core.stats()
        simulated.append(
            (
                s1.prefix_cache_queries_tokens - s0.prefix_cache_queries_tokens,
                s1.prefix_cache_hits_tokens - s0.prefix_cache_hits_tokens,
            )
        )
    assert simulated == measured
    assert sum(h for _, h in measured) > 0  # the sequence exercises hits ...
    assert any(h == 0 for _, h in measured[12:])  # ... and misses after eviction


def test_concurrent_preempting_workload_within_tolerance(small_pool_server: Any) -> None:
    server = small_pool_server
    server.post_json("/reset_prefix_cache", {})
    shared = ids(256, 20)
    prompts = [shared + ids(300, 30 + i) for i in range(6)]
    before = server.metrics()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(lambda p: server.complete(p, max_tokens=200), prompts))
    after = server.settled_metrics(DONE, before.get(DONE, 0.0) + len(prompts))
    assert all(a["usage"]["completion_tokens"] == 200 for a in answers)
    measured_preempt = after["vllm:num_preemptions_total"] - before["vllm:num_preemptions_total"]
    measured_hits = after[HITS] - before[HITS]
    measured_queries = after[QUERIES] - before[QUERIES]

    core = simulate(prompts, 200, at_once=True)
    st = core.stats()
    assert measured_preempt > 0 and st.num_preemptions > 0  # the workload does preempt
    # queries count each request once, at its first admission, in both (vLLM 0.32 counts a
    # preempted request's re-admission in separate "preempted" stats, not in this counter)
    assert st.prefix_cache_queries_tokens == measured_queries == sum(map(len, prompts))
    # the shared 256-token prefix (2 blocks) is a hit for every request but the first
    assert st.prefix_cache_hits_tokens == measured_hits == 5 * 256
    assert abs(st.num_preemptions - measured_preempt) <= PREEMPT_TOLERANCE * measured_preempt, (
        st.num_preemptions,
        measured_preempt,
    )
