"""``generate_stream(..., compact_ids=True)``: the same requests, prompts as ``array('q')``.

The tuple path (the default, checked by the rest of this suite) is the reference: every field
and every token id must match it, for a plain workload and for sessions with shared prefixes,
tenants and dynamic fields before or after the shared part.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pytest

from kvbudget.workload.spec import generate_stream, workload_from_dict

_POISSON = {"kind": "poisson", "rate_per_s": 5}
_CASES: list[dict[str, Any]] = [
    {"num_requests": 300, "arrivals": _POISSON},
    {
        "num_requests": 300,
        "arrivals": _POISSON,
        "prefix": {
            "system_prompt_tokens": 100,
            "num_groups": 3,
            "group_prefix_tokens": 50,
            "dynamic_tokens": 7,
        },
        "sessions": {"num_turns": 3, "turn_interval_s": 2},
        "tenants": {"names": ["a", "b"]},
    },
    {
        "num_requests": 300,
        "arrivals": _POISSON,
        "prefix": {"system_prompt_tokens": 100, "dynamic_tokens": 7, "dynamic_position": "before"},
        "sessions": {"num_turns": 2},
    },
]


@pytest.mark.parametrize("case", _CASES, ids=["plain", "sessions-prefixes", "dynamic-before"])
def test_compact_ids_same_requests(case: dict[str, Any]) -> None:
    spec = workload_from_dict(case)
    plain = list(generate_stream(spec, np.random.default_rng(7)))
    compact = list(generate_stream(spec, np.random.default_rng(7), compact_ids=True))
    assert len(compact) == len(plain) == 300
    for a, b in zip(plain, compact, strict=True):
        assert isinstance(a.prompt_token_ids, tuple)
        assert isinstance(b.prompt_token_ids, array) and b.prompt_token_ids.typecode == "q"
        assert tuple(b.prompt_token_ids) == a.prompt_token_ids
        for name in a.__slots__:
            if name != "prompt_token_ids":
                assert getattr(b, name) == getattr(a, name), name
