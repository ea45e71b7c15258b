"""WorkloadSpec + generate: prompt layout, tenants, salts, sessions, determinism, errors."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.errors import ConfigError
from kvbudget.workload.prefixes import TenantSpec, zipf_probabilities
from kvbudget.workload.spec import generate, load_workload_yaml, workload_from_dict
from kvbudget.workload.tokenizer import get_tokenizer


def plan(data: dict[str, Any], seed: int = 0) -> list[Any]:
    return generate(workload_from_dict(data), np.random.default_rng(seed))


BASE: dict[str, Any] = {
    "num_requests": 40,
    "arrivals": {"kind": "poisson", "rate_per_s": 10.0},
    "input_tokens": {"kind": "fixed", "value": 100},
    "output_tokens": {"kind": "fixed", "value": 8},
}


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_zipf_hand_worked() -> None:
    # s = 1, 3 groups: weights 1, 1/2, 1/3 over 11/6
    assert zipf_probabilities(3, 1.0).tolist() == pytest.approx([6 / 11, 3 / 11, 2 / 11])
    assert zipf_probabilities(4, 0.0).tolist() == pytest.approx([0.25] * 4)


def test_counts_sorted_ids_and_lengths() -> None:
    reqs = plan(BASE)
    assert len(reqs) == 40
    assert [r.request_id for r in reqs] == [f"r{i:06d}" for i in range(40)]
    times = [r.arrival_s for r in reqs]
    assert times == sorted(times) and times[0] >= 0
    assert all(r.prompt_tokens == 100 and r.output_tokens == 8 for r in reqs)


def test_determinism_same_seed_same_output() -> None:
    data = {**BASE, "prefix": {"num_groups": 3, "group_prefix_tokens": 32}}
    assert plan(data, 5) == plan(data, 5)
    assert plan(data, 5) != plan(data, 6)


def test_shared_prefix_after_keeps_reuse_before_kills_it() -> None:
    prefix = {"system_prompt_tokens": 20, "num_groups": 1, "group_prefix_tokens": 30}
    after = plan({**BASE, "prefix": {**prefix, "dynamic_tokens": 5, "dynamic_position": "after"}})
    before = plan({**BASE, "prefix": {**prefix, "dynamic_tokens": 5, "dynamic_position": "before"}})
    a0, a1 = after[0].prompt_token_ids, after[1].prompt_token_ids
    assert common_prefix(a0, a1) >= 50
    assert after[0].shared_prefix_tokens == 50
    assert all(r.prompt_tokens == 100 for r in after)
    b0, b1 = before[0].prompt_token_ids, before[1].prompt_token_ids
    assert common_prefix(b0, b1) < 5  # only a chance collision of random first tokens
    assert before[0].shared_prefix_tokens == 0
    # the shared 50 tokens still follow the dynamic field
    assert b0[5:55] == b1[5:55]


def test_groups_follow_zipf_and_share_content() -> None:
    data = {
        **BASE,
        "num_requests": 3000,
        "input_tokens": {"kind": "fixed", "value": 20},
        "prefix": {"num_groups": 4, "group_prefix_tokens": 10, "zipf_s": 1.0},
    }
    reqs = plan(data)
    counts = np.bincount([r.prefix_group for r in reqs], minlength=4) / 3000
    # Zipf s = 1 over 4 groups: (1/k) / H_4 with H_4 = 25/12 -> 12/25, 6/25, 4/25, 3/25
    assert counts.tolist() == pytest.approx([12 / 25, 6 / 25, 4 / 25, 3 / 25], abs=0.03)
    same = [r for r in reqs if r.prefix_group == 2][:2]
    assert same[0].prompt_token_ids[:10] == same[1].prompt_token_ids[:10]


def test_tenants_salts_and_scope() -> None:
    tenants = {"names": ["a", "b"], "salt": "per_tenant"}
    prefix = {"system_prompt_tokens": 16}
    reqs = plan({**BASE, "tenants": tenants, "prefix": prefix}, seed=1)
    by = {r.tenant: r for r in reqs}
    assert set(by) == {"a", "b"}
    assert by["a"].cache_salt != by["b"].cache_salt
    # global scope: both tenants share the system prompt (the cross-tenant case)
    assert by["a"].prompt_token_ids[:16] == by["b"].prompt_token_ids[:16]
    iso = plan({**BASE, "tenants": tenants, "prefix": {**prefix, "scope": "tenant"}}, seed=1)
    by_iso = {r.tenant: r for r in iso}
    assert by_iso["a"].prompt_token_ids[:16] != by_iso["b"].prompt_token_ids[:16]


def test_salt_rule_matches_documented_hash() -> None:
    spec = TenantSpec(names=["acme"], salt="per_tenant")
    expected = hashlib.sha256(b"kvbudget-salt:42:acme").hexdigest()[:16]
    assert spec.salt_for("acme", 42) == expected
    custom = TenantSpec(names=["x"], salt="custom", salts={"x": "s3cret"})
    assert custom.salt_for("x", 1) == "s3cret"
    assert TenantSpec().salt_for("default", 1) is None


def test_sessions_extend_previous_turn() -> None:
    data = {
        "num_requests": 6,
        "arrivals": {"kind": "closed", "concurrency": 2},
        "input_tokens": {"kind": "fixed", "value": 10},
        "output_tokens": {"kind": "fixed", "value": 4},
        "sessions": {"num_turns": 3, "user_tokens": {"kind": "fixed", "value": 5}},
    }
    reqs = plan(data)
    tok = get_tokenizer()
    turns = sorted((r for r in reqs if r.session_id == "s000000"), key=lambda r: r.turn_index)
    assert [r.turn_index for r in turns] == [0, 1, 2]
    for prev, cur in itertools.pairwise(turns):
        history = prev.prompt_token_ids + tuple(tok.output_ids(prev.prompt_token_ids, 4))
        assert cur.prompt_token_ids[: len(history)] == history
        assert cur.prompt_tokens == len(history) + 5
        assert cur.shared_prefix_tokens == len(history)
    assert [r.prompt_tokens for r in turns] == [10, 19, 28]


def test_cancel_priority_keep_text() -> None:
    data = {
        **BASE,
        "num_requests": 400,
        "cancel_fraction": 0.25,
        "cancel_after_tokens": 3,
        "priorities": [0, 5],
        "priority_weights": [1, 1],
        "keep_prompt_text": True,
    }
    reqs = plan(data)
    cancelled = [r for r in reqs if r.cancel_after_tokens is not None]
    assert 0.15 < len(cancelled) / 400 < 0.35
    assert {r.cancel_after_tokens for r in cancelled} == {3}
    assert {r.priority for r in reqs} == {0, 5}
    assert all(get_tokenizer().encode(r.prompt_text) == list(r.prompt_token_ids) for r in reqs)
    assert plan(BASE)[0].prompt_text is None


def test_duration_limits_arrivals() -> None:
    reqs = plan({**BASE, "num_requests": None, "duration_s": 3.0})
    assert reqs and max(r.arrival_s for r in reqs) < 3.0


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"arrivals": {"kind": "poisson", "rate_per_s": 1}}, "workload"),
        ({**BASE, "arrivals": {"kind": "poisson", "rate_per_s": -1}}, "rate_per_s"),
        ({**BASE, "typo": 1}, "typo"),
        ({**BASE, "tenants": {"names": ["a"], "salt": "custom"}}, "tenants"),
        ({**BASE, "prefix": {"group_prefix_tokens": 5}}, "prefix"),
    ],
)
def test_config_errors_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        workload_from_dict(data)
    assert field in err.value.one_line()
    assert "\n" not in err.value.one_line()


def test_closed_loop_needs_count() -> None:
    spec = workload_from_dict({"duration_s": 5.0, "arrivals": {"kind": "closed", "concurrency": 4}})
    with pytest.raises(ConfigError, match="num_requests"):
        generate(spec, np.random.default_rng(0))


def test_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "num_requests: 5\narrivals: {kind: gamma, rate_per_s: 2, cv: 2}\n"
        "input_tokens: {kind: uniform, low: 10, high: 20}\n"
    )
    spec = load_workload_yaml(path)
    assert spec.arrivals.kind == "gamma"
    assert len(generate(spec, np.random.default_rng(0))) == 5
    with pytest.raises(ConfigError, match="does not exist"):
        load_workload_yaml(tmp_path / "missing.yaml")
