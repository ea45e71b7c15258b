"""Request routers for a cluster of replicas.

Every policy chooses a replica index from the replicas that are ready (cold replicas are skipped
until their start-up ends). Ties always go to the lowest index (deterministic).

* ``round_robin``: in turn.
* ``least_outstanding``: fewest requests routed and not finished.
* ``least_kv``: lowest KV-cache usage.
* ``session``: a session stays on the replica it first went to (first: least outstanding).
* ``prefix_approx``: longest match of the prompt's block hashes against the router's own
  routing history (which replica was last sent each block); no engine state is read, as in
  llm-d's approximate scorer. Falls back to ``least_outstanding`` when nothing matches or the
  chosen replica has ``imbalance_limit`` more outstanding requests than the least loaded.
* ``prefix_precise``: longest prefix actually cached on each replica (GPU pool, then tiers),
  read from an index that is refreshed every ``stale_s`` seconds (0 = live); falls back to
  load-aware when no replica has a hit.
* ``cost``: estimated TTFT per replica = queue wait + prefill of the uncached part + tier reload
  (:func:`estimate_ttft_s`); the smallest wins. A cache hit behind a long queue loses to an
  idle replica (the seed's example: A saves 0.8 s of prefill but queues 3 s; B has no cache and
  queues 0.1 s -> B).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from kvbudget.errors import ConfigError
from kvbudget.sim.timing import StepTimeModel

RouterName = Literal[
    "round_robin",
    "least_outstanding",
    "least_kv",
    "session",
    "prefix_approx",
    "prefix_precise",
    "cost",
]
ROUTERS: tuple[str, ...] = (
    "round_robin",
    "least_outstanding",
    "least_kv",
    "session",
    "prefix_approx",
    "prefix_precise",
    "cost",
)


class ReplicaView(Protocol):
    """What a router may read from a replica."""

    name: str
    timing: StepTimeModel

    def num_outstanding(self) -> int: ...

    def kv_usage(self) -> float: ...

    def queued_prefill_tokens(self) -> int: ...

    def cached_prefix_tokens(self, block_hashes: list[Hashable]) -> tuple[int, int]: ...

    def tier_reload_s(self, num_tokens: int) -> float: ...

    def cached_keys(self) -> set[Hashable]: ...

    @property
    def block_size(self) -> int: ...


@dataclass(slots=True, init=False, unsafe_hash=True)
class RouteRequest:
    """The router's view of a request."""

    request_id: Final[str]
    num_prompt_tokens: Final[int]
    block_hashes: Final[list[Hashable]]
    session_id: Final[str | None]

    def __init__(
        self,
        request_id: str,
        num_prompt_tokens: int,
        block_hashes: list[Hashable],
        session_id: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.num_prompt_tokens = num_prompt_tokens
        self.block_hashes = block_hashes
        self.session_id = session_id


def estimate_ttft_s(queue_s: float, prefill_uncached_s: float, reload_s: float) -> float:
    """Estimated time to first token on a replica: wait + compute the miss + reload tiers."""
    return queue_s + prefill_uncached_s + reload_s


def replica_queue_s(view: ReplicaView) -> float:
    """Queue estimate: time to prefill the prompt tokens already queued on the replica."""
    tokens = view.queued_prefill_tokens()
    return view.timing.prefill_time_s(tokens) if tokens > 0 else 0.0


class Router:
    """All policies behind one ``choose``."""

    def __init__(
        self,
        policy: str,
        *,
        stale_s: float = 0.0,
        imbalance_limit: int = 8,
        history_blocks: int = 100_000,
    ) -> None:
        if policy not in ROUTERS:
            raise ConfigError(
                f"router: unknown policy {policy!r}; choose one of {', '.join(ROUTERS)}",
                field="router",
            )
        self.policy = policy
        self.stale_s = stale_s
        self.imbalance_limit = imbalance_limit
        self.history_blocks = history_blocks
        self._rr = 0
        self._sessions: dict[str, int] = {}
        self._history: OrderedDict[Hashable, int] = OrderedDict()
        self._index_time_s = -1.0
        self._snapshot: list[set[Hashable]] = []
        self.num_fallbacks = 0
        self.needs_hashes = policy in ("prefix_approx", "prefix_precise", "cost")

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _argmin(values: Sequence[float]) -> int:
        best = 0
        for i, v in enumerate(values):
            if v < values[best]:
                best = i
        return best

    def _least_outstanding(self, views: Sequence[ReplicaView]) -> int:
        return self._argmin([v.num_outstanding() for v in views])

    def _cached(
        self, views: Sequence[ReplicaView], req: RouteRequest, now_s: float
    ) -> list[tuple[int, int]]:
        if self.stale_s <= 0:
            return [v.cached_prefix_tokens(req.block_hashes) for v in views]
        # a stale index: the block keys each replica held at the last refresh
        if now_s - self._index_time_s >= self.stale_s or len(self._snapshot) != len(views):
            self._index_time_s = now_s
            self._snapshot = [v.cached_keys() for v in views]
        out: list[tuple[int, int]] = []
        for view, snap in zip(views, self._snapshot, strict=True):
            n = 0
            for h in req.block_hashes:
                if h not in snap:
                    break
                n += 1
            out.append((n * view.block_size, 0))
        return out

    # ------------------------------------------------------------------ choose
    def choose(self, req: RouteRequest, views: Sequence[ReplicaView], now_s: float) -> int:
        """Index (into ``views``) of the replica that gets ``req``."""
        if not views:
            raise ConfigError("router: no replica is ready", field="replicas")
        p = self.policy
        if p == "round_robin":
            idx = self._rr % len(views)
            self._rr += 1
            return idx
        if p == "least_outstanding":
            return self._least_outstanding(views)
        if p == "least_kv":
            return self._argmin([v.kv_usage() for v in views])
        if p == "session":
            if req.session_id is None:
                return self._least_outstanding(views)
            sticky = self._sessions.get(req.session_id)
            if sticky is None or sticky >= len(views):
                sticky = self._least_outstanding(views)
                self._sessions[req.session_id] = sticky
            return sticky
        if p == "prefix_approx":
            return self._prefix_approx(req, views)
        if p == "prefix_precise":
            cached = self._cached(views, req, now_s)
            best = max(range(len(views)), key=lambda i: (cached[i][0] + cached[i][1], -i))
            if cached[best][0] + cached[best][1] == 0:
                self.num_fallbacks += 1
                return self._least_outstanding(views)
            return best
        return self._cost(req, views, now_s)

    def _prefix_approx(self, req: RouteRequest, views: Sequence[ReplicaView]) -> int:
        match = [0] * len(views)
        for h in req.block_hashes:
            owner = self._history.get(h)
            if owner is None or owner >= len(views):
                break
            match[owner] += 1
        least = self._least_outstanding(views)
        best = max(range(len(views)), key=lambda i: (match[i], -i))
        chosen = best
        if match[best] == 0 or (
            views[best].num_outstanding() - views[least].num_outstanding() > self.imbalance_limit
        ):
            self.num_fallbacks += 1
            chosen = least
        for h in req.block_hashes:
            self._history[h] = chosen
            self._history.move_to_end(h)
        while len(self._history) > self.history_blocks:
            self._history.popitem(last=False)
        return chosen

    def _cost(self, req: RouteRequest, views: Sequence[ReplicaView], now_s: float) -> int:
        cached = self._cached(views, req, now_s)
        costs = []
        for view, (gpu, tier) in zip(views, cached, strict=True):
            hit = min(gpu + tier, max(0, req.num_prompt_tokens - 1))
            tier = max(0, hit - gpu)
            uncached = req.num_prompt_tokens - hit
            prefill_s = view.timing.prefill_time_s(uncached, hit)
            costs.append(
                estimate_ttft_s(replica_queue_s(view), prefill_s, view.tier_reload_s(tier))
            )
        return self._argmin(costs)
