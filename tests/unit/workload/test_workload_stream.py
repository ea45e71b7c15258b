"""``generate_stream`` yields exactly ``generate``'s requests when arrivals need no sort.

The oracle is the build-everything-then-sort path (``_generate_sorted``, what ``generate`` did
before streaming), forced on the same spec and seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvbudget.workload import spec as wspec
from kvbudget.workload.spec import generate_stream, workload_from_dict

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
]  # fmt: skip


@pytest.mark.parametrize("data", SPECS)
def test_stream_equals_the_sorted_build(data: dict[str, Any], monkeypatch: Any) -> None:
    monkeypatch.setattr(wspec, "DRAW_CHUNK_SESSIONS", 7)  # many chunks
    spec = workload_from_dict(data)
    streamed = list(generate_stream(spec, np.random.default_rng(5)))
    rng = np.random.default_rng(5)
    tok = wspec.get_tokenizer(spec.vocab_size)
    base_seed = int(rng.integers(0, 2**62))
    plan = wspec._SessionPlan(spec, rng, tok, base_seed)
    monkeypatch.setattr(wspec, "DRAW_CHUNK_SESSIONS", 10**9)  # one draw, as before
    oracle = list(wspec._generate_sorted(plan, rng))
    assert streamed == oracle
    assert len(streamed) > 100
