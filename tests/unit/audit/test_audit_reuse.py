"""Reuse-correctness audit: the comparison rules on hand-made completions, and the audit
against the embedded engine in virtual time (whose output is the tokenizer's rule-4 text)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import numpy as np

from kvbudget.audit.probe_sim import SimProbe, SimProbeOptions
from kvbudget.audit.probes import Completion
from kvbudget.audit.reuse import ReuseConfig, ReuseResult, compare, make_prompts, run_reuse

CFG = ReuseConfig(logprobs=3, tolerance=0.05)


def _c(tokens: list[str], tops: list[dict[str, float]] | None = None) -> Completion:
    return Completion(
        text="".join(tokens),
        tokens=tuple(tokens),
        top_logprobs=tuple(tops) if tops is not None else None,
        cached_tokens=0,
    )


def test_identical_outputs() -> None:
    assert compare(_c(["a", " b"]), _c(["a", " b"]), CFG).verdict == "identical"


def test_first_difference_is_reported_by_index() -> None:
    res = compare(_c(["a", " b", " c", " d"]), _c(["a", " b", " x", " d"]), CFG)
    assert res.verdict == "diverged_at_token_2" and res.first_divergence == 2


def test_a_shorter_output_diverges_where_it_ends() -> None:
    res = compare(_c(["a", " b", " c"]), _c(["a", " b"]), CFG)
    assert res.verdict == "diverged_at_token_2"


def test_near_tie_within_tolerance() -> None:
    tops_a = [{"a": -0.1}, {" b": -0.70, " x": -0.72, " y": -3.0}]
    tops_b = [{"a": -0.1}, {" x": -0.69, " b": -0.71, " y": -3.0}]
    res = compare(_c(["a", " b", " c"], tops_a), _c(["a", " x", " z"], tops_b), CFG)
    assert res.verdict == "within_tolerance" and res.first_divergence == 1


def test_gap_above_tolerance_is_a_divergence() -> None:
    tops_a = [{"a": -0.1}, {" b": -0.2, " x": -2.0}]
    tops_b = [{"a": -0.1}, {" x": -0.2, " b": -2.0}]
    res = compare(_c(["a", " b"], tops_a), _c(["a", " x"], tops_b), CFG)
    assert res.verdict == "diverged_at_token_1"


def test_token_outside_the_top_k_is_a_divergence() -> None:
    tops_a = [{" b": -0.5, " c": -0.51}]
    tops_b = [{" q": -0.5, " b": -0.52}]
    assert compare(_c([" b"], tops_a), _c([" q"], tops_b), CFG).verdict == "diverged_at_token_0"


def test_no_logprobs_means_no_tolerance() -> None:
    assert compare(_c(["a"]), _c(["b"]), CFG).verdict == "diverged_at_token_0"


def _audit(cfg: ReuseConfig, **sim: Any) -> ReuseResult:
    probe = SimProbe(SimProbeOptions(**sim), np.random.default_rng(cfg.seed))
    return asyncio.run(run_reuse(probe, cfg))


def test_embedded_engine_passes_with_reuse_shown_and_prompts_hashed() -> None:
    # 100-token prompts, 16-token blocks: the hot run finds 6 full blocks = 96 tokens
    cfg = ReuseConfig(num_prompts=3, prompt_tokens=100, max_tokens=8)
    res = _audit(cfg, block_size=16)
    assert res.verdict == "pass" and res.status == "pass"
    assert [p.hot.cached_tokens for p in res.prompts] == [96, 96, 96]
    assert [p.cold.cached_tokens for p in res.prompts] == [0, 0, 0]
    assert all(p.after_reset_path == "recomputed" for p in res.prompts)
    assert all(p.hot.hit_counter_delta == 96 for p in res.prompts)
    texts = [t for _, t in make_prompts(cfg)]
    assert [p.prompt_sha256 for p in res.prompts] == [
        hashlib.sha256(t.encode()).hexdigest() for t in texts
    ]
    dumped = res.model_dump_json() + res.to_markdown()
    assert all(t[:40] not in dumped for t in texts)


def test_engine_without_prefix_caching_is_reuse_not_exercised() -> None:
    res = _audit(
        ReuseConfig(num_prompts=2, prompt_tokens=64, max_tokens=4), enable_prefix_caching=False
    )
    assert res.verdict == "reuse_not_exercised" and res.status == "inconclusive"
    assert res.num_reuse_proven == 0


def test_no_reset_leaves_the_after_reset_run_untested() -> None:
    res = _audit(ReuseConfig(num_prompts=2, prompt_tokens=64, max_tokens=4, reset=False))
    assert res.verdict == "incomplete" and res.status == "inconclusive"
    assert all(p.after_reset_vs_cold.verdict == "untested" for p in res.prompts)


class _CorruptingSim(SimProbe):
    """Counts the hit, then returns a different token after position 2 (the seed's example)."""

    async def complete(self, *args: Any, **kwargs: Any) -> Completion:
        c = await super().complete(*args, **kwargs)
        if (c.cached_tokens or 0) > 0 and c.tokens:
            toks = list(c.tokens)
            toks[2] = " corrupted"
            return Completion("".join(toks), tuple(toks), None, c.cached_tokens)
        return c


def test_hits_counted_and_output_corrupted_is_caught() -> None:
    cfg = ReuseConfig(num_prompts=2, prompt_tokens=64, max_tokens=6)
    probe = _CorruptingSim(SimProbeOptions(), np.random.default_rng(0))
    res = asyncio.run(run_reuse(probe, cfg))
    assert res.verdict == "diverged" and res.status == "fail"
    assert [p.hot_vs_cold.verdict for p in res.prompts] == ["diverged_at_token_2"] * 2
    assert all(p.reuse_proven for p in res.prompts)
