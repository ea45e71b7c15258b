"""Routing policies, including the seed's "don't just pick the most hits" example."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import pytest

from kvbudget.errors import ConfigError
from kvbudget.sim.router import Router, RouteRequest, estimate_ttft_s
from kvbudget.sim.timing import FixedTiming, StepTimeModel


class SecondsPerToken(FixedTiming):
    """Prefill costs ``s_per_token`` per uncached token (no overhead), for hand arithmetic."""

    def __init__(self, s_per_token: float) -> None:
        super().__init__()
        self.s_per_token = s_per_token

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        return num_tokens * self.s_per_token


@dataclass
class FakeView:
    name: str
    queue_tokens: int
    cached_tokens: int
    outstanding: int = 0
    usage: float = 0.0
    timing: StepTimeModel = field(default_factory=lambda: SecondsPerToken(0.001))
    block_size: int = 16
    keys: set[str] = field(default_factory=set)

    def num_outstanding(self) -> int:
        return self.outstanding

    def kv_usage(self) -> float:
        return self.usage

    def queued_prefill_tokens(self) -> int:
        return self.queue_tokens

    def cached_prefix_tokens(self, block_hashes: list[Hashable]) -> tuple[int, int]:
        return self.cached_tokens, 0

    def tier_reload_s(self, num_tokens: int) -> float:
        return 0.0

    def cached_keys(self) -> set[Hashable]:
        return set(self.keys)


def _req(num_tokens: int = 1000, session: str | None = None) -> RouteRequest:
    return RouteRequest("r", num_tokens, [f"h{i}" for i in range(num_tokens // 16)], session)


def test_seed_example_cost_router_picks_the_short_queue() -> None:
    # 1 ms per prefill token: A has 800 tokens cached (saves 0.8 s) behind a 3 s queue
    # (3000 queued tokens); B has nothing cached behind a 0.1 s queue (100 tokens).
    a = FakeView("A", queue_tokens=3000, cached_tokens=800)
    b = FakeView("B", queue_tokens=100, cached_tokens=0)
    # estimated TTFT: A = 3.0 + (1000 - 800) * 0.001 = 3.2 s; B = 0.1 + 1000 * 0.001 = 1.1 s
    assert estimate_ttft_s(3.0, 0.2, 0.0) == pytest.approx(3.2)
    assert Router("cost").choose(_req(), [a, b], 0.0) == 1
    # the cache-only policy would pick A
    assert Router("prefix_precise").choose(_req(), [a, b], 0.0) == 0
    # with equal queues the hit wins
    a.queue_tokens = 100
    assert Router("cost").choose(_req(), [a, b], 0.0) == 0


def test_round_robin_and_load_aware() -> None:
    views = [FakeView("0", 0, 0, outstanding=3, usage=0.2), FakeView("1", 0, 0, 1, 0.9)]
    rr = Router("round_robin")
    assert [rr.choose(_req(), views, 0.0) for _ in range(4)] == [0, 1, 0, 1]
    assert Router("least_outstanding").choose(_req(), views, 0.0) == 1
    assert Router("least_kv").choose(_req(), views, 0.0) == 0


def test_session_affinity_sticks() -> None:
    views = [FakeView("0", 0, 0, outstanding=0), FakeView("1", 0, 0, outstanding=5)]
    router = Router("session")
    assert router.choose(_req(session="s1"), views, 0.0) == 0
    views[0].outstanding = 10
    assert router.choose(_req(session="s1"), views, 0.0) == 0  # sticky despite load
    assert router.choose(_req(session="s2"), views, 0.0) == 1


def test_prefix_approx_uses_history_and_falls_back_on_imbalance() -> None:
    views = [FakeView("0", 0, 0, outstanding=0), FakeView("1", 0, 0, outstanding=0)]
    router = Router("prefix_approx", imbalance_limit=2)
    assert router.choose(_req(), views, 0.0) == 0  # no history: least outstanding (tie -> 0)
    views[0].outstanding = 1
    assert router.choose(_req(), views, 0.0) == 0  # history says replica 0 has these blocks
    views[0].outstanding = 5  # 5 - 0 > 2: too imbalanced -> load-aware fallback
    assert router.choose(_req(), views, 0.0) == 1
    assert router.num_fallbacks == 2


def test_precise_falls_back_without_hits() -> None:
    views = [FakeView("0", 0, 0, outstanding=4), FakeView("1", 0, 0, outstanding=2)]
    assert Router("prefix_precise").choose(_req(), views, 0.0) == 1


def test_unknown_policy_is_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown policy 'random'"):
        Router("random")


def test_stale_index_sees_the_cache_only_after_a_refresh() -> None:
    req = _req(64)  # 4 blocks: h0..h3
    views = [FakeView("0", 0, 0, outstanding=0), FakeView("1", 0, 0, outstanding=1)]
    router = Router("prefix_precise", stale_s=1.0)
    assert router.choose(req, views, 0.0) == 0  # index built at t=0: nothing cached
    views[1].keys = {"h0", "h1", "h2", "h3"}  # replica 1 now holds the prefix
    assert router.choose(req, views, 0.5) == 0  # stale index: still no hit -> fallback
    assert router.choose(req, views, 1.0) == 1  # refreshed at t=1.0: 64 cached tokens
    assert router.num_fallbacks == 2
