"""Deterministic event queue: a heap keyed ``(time_s, priority, seq)``.

Ties in time are broken by ``priority`` (lower first), then by ``seq``, a per-queue counter
that increases with every push, so two events with the same time and priority pop in the order
they were pushed. Nothing depends on object identity or hash order; the same pushes give the
same pops in every process.

Priorities used by the cluster (lower runs first at equal times): a KV transfer that ends,
then arrivals (so a request arriving exactly at a step boundary joins that step), then
scale-out events, then replica steps, then closed-loop replacements (a request the client
sends because one finished at this boundary reaches the engine after its next step has begun:
vLLM's ``EngineCore.run_busy_loop`` drains its input queue and then steps, while the finished
request's output still travels to the client and the new request back), then state samples.
"""

from __future__ import annotations

import heapq
from typing import Generic, TypeVar

PRIO_TRANSFER_DONE = 0
PRIO_ARRIVAL = 1
PRIO_SCALE = 2
PRIO_STEP = 3
PRIO_RELEASED = 4
PRIO_SAMPLE = 5

T = TypeVar("T")


class EventQueue(Generic[T]):
    """A min-heap of ``(time_s, priority, seq, payload)``; ``seq`` is this queue's counter.

    A plain class, not a dataclass: mypyc cannot compile a generic dataclass (its import fails
    with "attribute '__dict__' of 'type' objects is not writable", mypyc/mypyc#1061).
    """

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, T]] = []
        self._seq = 0

    def push(self, time_s: float, priority: int, payload: T) -> int:
        """Add an event; returns its sequence number."""
        seq = self._seq
        self._seq += 1
        heapq.heappush(self._heap, (time_s, priority, seq, payload))
        return seq

    def pop(self) -> tuple[float, int, int, T]:
        """Remove and return the earliest event."""
        return heapq.heappop(self._heap)

    def peek_time(self) -> float | None:
        """Time of the earliest event, or ``None`` when empty."""
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def num_pushed(self) -> int:
        """Events pushed so far (the per-run counter)."""
        return self._seq
