"""The engine's one conversion of a request (``sim.request.as_engine_request``).

Expected values are the planned request's own fields, written out by hand, and the engine's
documented defaults (no adapter, no multimodal hashes, no KV transferred).
"""

from __future__ import annotations

from array import array

from kvbudget.sim.request import EngineRequest, as_engine_request
from kvbudget.workload.request import PlannedRequest


def test_a_planned_request_gives_its_fields_and_the_engine_defaults() -> None:
    ids = array("q", [5, 6, 7])
    planned = PlannedRequest(
        "s000001-t01",
        2.5,
        ids,
        40,
        prompt_text="not carried",
        tenant="t-b",
        cache_salt="salt",
        session_id="s000001",
        priority=3,
        cancel_after_tokens=7,
        cell_id="short/single",
        turn_index=1,
    )
    got = as_engine_request(planned)
    assert got == EngineRequest(
        "s000001-t01",
        ids,
        40,
        arrival_s=2.5,
        priority=3,
        cache_salt="salt",
        session_id="s000001",
        tenant="t-b",
        cell_id="short/single",
        cancel_after_tokens=7,
    )
    assert got.prompt_token_ids is ids  # compact ids are not copied
    assert (got.adapter_id, got.mm_hashes, got.kv_transferred) == (None, (), False)


def test_a_list_prompt_is_copied_to_a_tuple_and_arrival_can_be_moved() -> None:
    prompt = [1, 2, 3, 4]
    got = as_engine_request(PlannedRequest("r0", 1.0, prompt, 2), arrival_s=11.0)
    assert got.prompt_token_ids == (1, 2, 3, 4)
    assert got.arrival_s == 11.0
    prompt.append(5)  # the engine's copy is its own
    assert got.num_prompt_tokens == 4


def test_an_engine_request_is_returned_as_it_is_unless_moved() -> None:
    req = EngineRequest("a", (1, 2), 3, arrival_s=0.5)
    assert as_engine_request(req) is req
    moved = as_engine_request(req, arrival_s=4.0)
    assert (moved.arrival_s, req.arrival_s) == (4.0, 0.5)
    assert moved.request_id == "a"


def test_the_generator_builds_engine_requests_directly_as_the_conversion_would() -> None:
    """``generate_stream(make=engine_request)`` (the simulator's trace-scale path) gives, one
    by one, what converting each ``PlannedRequest`` gives: multi-turn sessions, tenants with
    salts, priorities and cancellations, so every carried field is exercised."""
    import numpy as np

    from kvbudget.sim.request import engine_request
    from kvbudget.workload.spec import generate_stream, workload_from_dict

    spec = workload_from_dict(
        {
            "num_requests": 40,
            "arrivals": {"kind": "poisson", "rate_per_s": 5.0},
            "input_tokens": {"kind": "fixed", "value": 64},
            "output_tokens": {"kind": "fixed", "value": 8},
            "sessions": {"num_turns": 3, "user_tokens": {"kind": "fixed", "value": 5}},
            "tenants": {"names": ["a", "b"], "salt": "per_tenant"},
            "priorities": [0, 1, 2],
            "priority_weights": [1, 1, 1],
            "cancel_fraction": 0.3,
            "cancel_after_tokens": 2,
        }
    )
    planned = list(generate_stream(spec, np.random.default_rng(5), compact_ids=True))
    direct = list(
        generate_stream(spec, np.random.default_rng(5), compact_ids=True, make=engine_request)
    )
    assert direct == [as_engine_request(p) for p in planned]
    assert len({r.session_id for r in direct}) > 1 and len({r.priority for r in direct}) > 1
    assert any(r.cancel_after_tokens for r in direct) and any(r.cache_salt for r in direct)
