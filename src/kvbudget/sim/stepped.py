"""The step protocol: what the driver (:mod:`kvbudget.sim.driver`) needs from an engine.

Every simulated engine is stepped by the one driver: the vLLM-style paged replica
(:class:`kvbudget.sim.replica.Replica`), llama.cpp's slot server
(:class:`kvbudget.sim.slots_replica.SlotReplica`) and a MoE model's data-parallel engines in
lockstep (:class:`kvbudget.sim.lockstep.LockstepGroup`, over paged replicas). Each is a
:class:`SteppedReplica`; ``F`` is
what it hands out when a request ends (the paged engine's :class:`~kvbudget.sim.request.SimRequest`,
the slot server's :class:`~kvbudget.sim.slots.SlotRequestResult`).

Invariants an engine keeps (the driver relies on them, and on nothing else of the engine):

- ``add(req)`` takes a request now or raises :class:`~kvbudget.errors.KvbudgetError` (a refusal:
  the driver hands it to ``on_reject``); it never steps.
- ``step(now_s)`` applies one engine step's state change at ``now_s`` and returns its duration
  (simulated seconds; 0 when nothing could run). Its tokens exist at ``now_s + duration``; an
  arrival handled before that joins the next step, never this one.
- A request that ended in a step is in ``finished()`` when ``step`` returns, once, in the order
  it ended; the driver empties that list (a refusal found while stepping, as llama.cpp's slot
  server finds a prompt that fits no slot, is an ending too).
- ``last_num_scheduled_tokens``: tokens the last step computed (a zero-cost timing model still
  steps when it is positive); ``last_outputs``: that step's tokens (empty where not tracked).
- ``has_work()``: something waits or runs; ``wake_s()``: when an engine whose requests all wait
  on a transfer can continue (``None``: not stalled).

The fields below the protocol's methods are the driver's own bookkeeping of each replica (its
readiness, step chain and held arrivals); an engine only initialises them. The router reads
the view methods (:class:`kvbudget.sim.router.ReplicaView`); an engine without a prefix cache
or KV tiers keeps their defaults.

A plain generic class (no dataclass, no ``Protocol``): mypyc compiles the driver's accesses to
these fields natively, as it did when the driver knew only the paged replica.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from kvbudget.sim.engine import TokenOutput
from kvbudget.sim.prefix import BlockHash
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import StepTimeModel

F = TypeVar("F")

__all__ = ["F", "SteppedReplica"]


class SteppedReplica(Generic[F]):
    """One engine the driver steps (see the module for the invariants)."""

    def __init__(self, name: str, timing: StepTimeModel, *, ready_s: float = 0.0) -> None:
        self.name = name
        self.timing = timing
        #: accepts work from this time on (cold start for scale-out; infinity once it drains
        #: for scale-in or has crashed)
        self.ready_s = ready_s
        #: after ready_s, traffic shifts to it over this many seconds (scale-out warm-up)
        self.warmup_s = 0.0
        #: end of the step the driver last started on it (what is in flight at an event)
        self.step_end_s = 0.0
        self.busy = False
        #: async scheduling: requests that reached the replica while a step ran, added to the
        #: engine once the next step has been scheduled
        self.async_scheduling = False
        self.held: list[EngineRequest] = []
        #: an arrival woke the replica and its first step has not begun yet
        self.waking = False
        #: waiting only for a transfer to end (an arrival may restart it sooner)
        self.stalled = False
        #: generation of the replica's step chain (stale step events are dropped)
        self.step_gen = 0
        self.num_routed = 0
        self.last_outputs: list[TokenOutput] = []
        self.last_num_scheduled_tokens = 0

    # ------------------------------------------------------------------ the step protocol
    def add(self, req: EngineRequest) -> object:
        """Take ``req`` now, or raise ``KvbudgetError`` (refused)."""
        raise NotImplementedError

    def has_work(self) -> bool:
        raise NotImplementedError

    def step(self, now_s: float) -> float:
        """One engine step at ``now_s``; returns its duration (0 when nothing could run)."""
        raise NotImplementedError

    def finished(self) -> list[F]:
        """Requests that ended and were not handed out yet (the driver empties the list)."""
        raise NotImplementedError

    def ended_s(self, item: F, step_end_s: float) -> float:
        """When ``item`` (handed out by the step that ends at ``step_end_s``) ended: what a
        closed loop's turnaround counts from (``DriveOptions.turnaround_s``)."""
        return step_end_s

    def wake_s(self) -> float | None:
        """When a stalled engine (only transfers pending) can run again."""
        return None

    def sample(self, now_s: float) -> None:
        """Keep a sample of the engine's state (the driver's default ``on_sample``)."""
        return None

    # ------------------------------------------------------------------ router views
    def prompt_hashes(self, req: EngineRequest) -> list[BlockHash]:
        """``req``'s prompt block hashes as this engine's cache keys them (none: no cache)."""
        return []

    def num_outstanding(self) -> int:
        raise NotImplementedError

    def kv_usage(self) -> float:
        raise NotImplementedError

    def queued_prefill_tokens(self) -> int:
        raise NotImplementedError

    def cached_prefix_tokens(self, block_hashes: list[Hashable]) -> tuple[int, int]:
        return 0, 0

    def tier_reload_s(self, num_tokens: int) -> float:
        return 0.0

    def cached_keys(self) -> set[Hashable]:
        return set()

    @property
    def block_size(self) -> int:
        return 1
