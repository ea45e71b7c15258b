"""``generate_stream`` yields exactly what the one-shot generator of f3e2cbd yielded.

The oracle is ``oneshot_reference.generate_stream_oneshot``: the generator as it was before the
per-session draws were streamed (every quantity drawn as one whole array), copied unchanged.
Chunk sizes are made small so that every quantity spans many chunks, blocks and skip chunks,
with odd sizes; one case runs at the default sizes over several blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvbudget.workload import draws, sessions
from kvbudget.workload import spec as wspec
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.spec import generate, generate_stream, workload_from_dict
from kvbudget.workload.tokenizer import get_tokenizer
from tests.unit.workload.oneshot_reference import generate_stream_oneshot

_EMPIRICAL_BINS = {"kind": "empirical", "edges": [1, 50, 400, 2000], "weights": [3, 2, 1]}
_EMPIRICAL_VALUES = {"kind": "empirical", "values": [8, 64, 512], "weights": [1, 1, 2]}

SPECS: list[dict[str, Any]] = [
    {"num_requests": 700, "arrivals": {"kind": "poisson", "rate_per_s": 20}},
    {
        "num_requests": 601,
        "arrivals": {"kind": "poisson", "rate_per_s": 5},
        "sessions": {"num_turns": 3, "turn_interval_s": 2.0},
        "prefix": {"system_prompt_tokens": 16, "num_groups": 3, "group_prefix_tokens": 20},
        "cancel_fraction": 0.2,
        "cancel_after_tokens": 4,
    },
    {"duration_s": 20, "arrivals": {"kind": "poisson", "rate_per_s": 30},
     "sessions": {"num_turns": 2, "turn_interval_s": 0.0}},
    {"duration_s": 40, "num_requests": 900,
     "arrivals": {"kind": "gamma", "rate_per_s": 10, "cv": 6.0},
     "input_tokens": {"kind": "lognormal", "median": 300, "sigma": 1.0, "max_tokens": 3000},
     "output_tokens": _EMPIRICAL_BINS},
    {"duration_s": 30, "arrivals": {"kind": "constant", "rate_per_s": 7.3},
     "input_tokens": {"kind": "uniform", "low": 10, "high": 900},
     "output_tokens": {"kind": "normal", "mean": 50, "std": 30, "min_tokens": 2}},
    {"num_requests": 333, "arrivals": {"kind": "constant", "rate_per_s": 3}},
    {"num_requests": 250, "arrivals": {"kind": "burst", "at_s": 1.5},
     "input_tokens": _EMPIRICAL_VALUES},
    {"num_requests": 260, "arrivals": {"kind": "closed", "concurrency": 4}},
    {"num_requests": 500, "arrivals": {"kind": "ramp", "stages": [
        {"rate_per_s": 5, "duration_s": 20}, {"rate_per_s": 30, "duration_s": 10}]}},
    {"arrivals": {"kind": "trace", "timestamps_s": [5.0, 1.0, 3.0, 2.0, 2.0, 9.0] * 40},
     "num_requests": 200},
    {
        "num_requests": 640,
        "arrivals": {"kind": "poisson", "rate_per_s": 9},
        "tenants": {"names": ["a", "b", "c"], "weights": [5, 1, 2], "salt": "per_tenant"},
        "priorities": [0, 1, 5],
        "priority_weights": [1, 2, 3],
        "prefix": {"system_prompt_tokens": 30, "dynamic_tokens": 3, "dynamic_position": "before",
                   "num_groups": 5, "group_prefix_tokens": 11, "scope": "tenant"},
        "sessions": {"num_turns": 4, "turn_interval_s": 0.5,
                     "user_tokens": {"kind": "uniform", "low": 1, "high": 40}},
        "input_tokens": {"kind": "uniform", "low": 60, "high": 300},
        "input_tokens_include_prefix": True,
        "cancel_fraction": 0.3,
    },
]  # fmt: skip


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(draws, "SKIP_CHUNK", 13)
    monkeypatch.setattr(sessions, "BLOCK_SESSIONS", 37)
    monkeypatch.setattr(sessions, "DRAW_CHUNK_SESSIONS", 5)


@pytest.mark.parametrize("compact_ids", [False, True])
@pytest.mark.parametrize("data", SPECS)
def test_stream_equals_the_oneshot_generator(
    data: dict[str, Any], compact_ids: bool, small_chunks: None
) -> None:
    spec = workload_from_dict(data)
    rng = np.random.default_rng(5)
    streamed = list(generate_stream(spec, rng, compact_ids=compact_ids))
    rng_ref = np.random.default_rng(5)
    oracle = list(generate_stream_oneshot(spec, rng_ref, compact_ids=compact_ids))
    assert streamed == oracle
    assert len(streamed) >= 100
    # the generator is left where the one-shot generator left it
    assert rng.random() == rng_ref.random()


def test_default_sizes_over_several_blocks() -> None:
    data = {"num_requests": 3 * sessions.BLOCK_SESSIONS + 17,
            "arrivals": {"kind": "poisson", "rate_per_s": 20},
            "input_tokens": {"kind": "fixed", "value": 16},
            "output_tokens": {"kind": "uniform", "low": 1, "high": 9}}  # fmt: skip
    spec = workload_from_dict(data)
    streamed = list(generate_stream(spec, np.random.default_rng(9), compact_ids=True))
    oracle = list(generate_stream_oneshot(spec, np.random.default_rng(9), compact_ids=True))
    assert streamed == oracle
    assert generate(spec, np.random.default_rng(9)) == list(
        generate_stream_oneshot(spec, np.random.default_rng(9))
    )


def test_unsorted_fallback_equals_the_merge(small_chunks: None) -> None:
    """The build-everything-then-sort path gives the merge's requests (sorted arrivals)."""
    spec = workload_from_dict(SPECS[1])
    streamed = list(generate_stream(spec, np.random.default_rng(5)))
    rng = np.random.default_rng(5)
    tok = get_tokenizer(spec.vocab_size)
    base_seed = int(rng.integers(0, 2**62))
    plan = sessions.SessionPlan(spec, rng, tok, base_seed)
    assert list(wspec._generate_sorted(plan, rng, PlannedRequest)) == streamed
