"""The event queue's tie-break order is pinned: (time, priority, push order)."""

from __future__ import annotations

from kvbudget.sim.events import (
    PRIO_ARRIVAL,
    PRIO_RELEASED,
    PRIO_SAMPLE,
    PRIO_SCALE,
    PRIO_STEP,
    PRIO_TRANSFER_DONE,
    EventQueue,
)


def test_tie_break_time_then_priority_then_push_order() -> None:
    q: EventQueue[str] = EventQueue()
    q.push(1.0, PRIO_STEP, "step@1")
    q.push(1.0, PRIO_ARRIVAL, "arrival-a@1")
    q.push(0.5, PRIO_SAMPLE, "sample@0.5")
    q.push(1.0, PRIO_ARRIVAL, "arrival-b@1")
    q.push(1.0, PRIO_TRANSFER_DONE, "transfer@1")
    q.push(1.0, PRIO_SCALE, "scale@1")
    q.push(1.0, PRIO_SAMPLE, "sample@1")
    popped = [q.pop()[3] for _ in range(len(q))]
    assert popped == [
        "sample@0.5",
        "transfer@1",
        "arrival-a@1",
        "arrival-b@1",
        "scale@1",
        "step@1",
        "sample@1",
    ]
    assert q.num_pushed == 7


def test_priorities_are_ordered_as_documented() -> None:
    assert PRIO_TRANSFER_DONE < PRIO_ARRIVAL < PRIO_SCALE < PRIO_STEP < PRIO_RELEASED < PRIO_SAMPLE


def test_payloads_are_never_compared() -> None:
    q: EventQueue[object] = EventQueue()
    a, b = object(), object()  # not orderable: a comparison would raise TypeError
    q.push(2.0, 0, a)
    q.push(2.0, 0, b)
    assert q.pop()[3] is a and q.pop()[3] is b
