"""Property: the reuse audit's comparison finds the first differing token (checked against a
plain loop) and never calls different outputs identical."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvbudget.audit.probes import Completion
from kvbudget.audit.reuse import ReuseConfig, compare

CFG = ReuseConfig(logprobs=0)
tokens = st.lists(st.sampled_from([" a", " b", " c", " d"]), min_size=0, max_size=12)


def _c(toks: list[str]) -> Completion:
    return Completion("".join(toks), tuple(toks), None, 0)


def _first_difference(a: list[str], b: list[str]) -> int | None:
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b) or a[i] != b[i]:
            return i
    return None


@given(tokens, tokens)
def test_first_divergence_matches_a_plain_loop(a: list[str], b: list[str]) -> None:
    res = compare(_c(a), _c(b), CFG)
    k = _first_difference(a, b)
    if k is None:
        assert res.verdict == "identical"
    else:
        assert res.verdict == f"diverged_at_token_{k}"
        assert res.first_divergence == k
