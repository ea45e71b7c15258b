"""The driver's request feed (closed loop) and its typed events. Expected values by hand: a
closed loop releases one request per finish or refusal, none once ``admit_until_s`` is past."""

from __future__ import annotations

import pytest

from kvbudget.errors import ConfigError
from kvbudget.sim.drive_events import SAMPLE, Arrival, DriveEvent, StepDue, next_sample_s, seed
from kvbudget.sim.drive_types import DriveOptions, RequestFeed
from kvbudget.sim.events import EventQueue
from kvbudget.sim.request import EngineRequest
from tests.unit.sim.helpers_sim import make_request


def _reqs(n: int) -> list[EngineRequest]:
    return [make_request(f"r{i}", 4, 2, arrival_s=float(i)) for i in range(n)]


def test_closed_loop_releases_one_per_finish_until_admit_until() -> None:
    feed = RequestFeed(_reqs(6), DriveOptions(concurrency=2, admit_until_s=10.0), 0)
    assert [feed.pull().request_id for _ in range(2)] == ["r0", "r1"]  # type: ignore[union-attr]
    assert [r.request_id for r in feed.release(1, 1.0)] == ["r2"]
    assert [r.request_id for r in feed.release(3, 2.0)] == ["r3", "r4"]
    assert feed.release(4, 10.0) == []  # a step ending at admit_until releases nothing
    assert feed.released == 4
    assert feed.refused(12.0) is None and feed.released == 5


def test_a_refusal_releases_the_next_request() -> None:
    feed = RequestFeed(_reqs(2), DriveOptions(concurrency=1), 0)
    assert feed.pull() is not None
    nxt = feed.refused(0.5)
    assert nxt is not None and nxt.request_id == "r1" and feed.released == 1
    assert feed.refused(0.6) is None  # the stream is empty


def test_seed_queues_the_closed_loop_and_the_first_sample() -> None:
    queue: EventQueue[DriveEvent] = EventQueue()
    feed = RequestFeed(_reqs(5), DriveOptions(concurrency=3), 0)
    seed(queue, feed, [], DriveOptions(sample_every_s=1.0), (), ())
    popped = [queue.pop()[3] for _ in range(len(queue))]
    r0, r1, r2 = (Arrival(r) for r in _reqs(3))
    assert popped == [r0, SAMPLE, r1, r2]  # at 0 s an arrival goes before a sample


def test_seed_refuses_a_closed_loop_below_one() -> None:
    feed = RequestFeed(_reqs(1), DriveOptions(concurrency=0), 0)
    with pytest.raises(ConfigError, match="concurrency: must be >= 1, got 0"):
        seed(EventQueue(), feed, [], DriveOptions(), (), ())


def test_an_idle_sample_waits_for_the_next_event() -> None:
    queue: EventQueue[DriveEvent] = EventQueue()
    assert next_sample_s([], queue, 1.0, 5.0) is None
    queue.push(9.0, 3, StepDue(0, 1))
    assert next_sample_s([], queue, 1.0, 5.0) == 9.0
    queue.push(5.5, 3, StepDue(0, 2))
    assert next_sample_s([], queue, 1.0, 5.0) == 6.0
