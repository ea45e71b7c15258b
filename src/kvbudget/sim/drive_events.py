"""The events :class:`kvbudget.sim.driver.Driver` queues: one small typed payload per kind.

Each event is its own type (a tagged union, :data:`DriveEvent`) and the driver has one handler
per type. The lifecycle events a caller gives (:class:`ScaleOut`, :class:`ScaleIn`,
:class:`Crash`) are queued as they are; the driver's own are the NamedTuples below (cheap to
make: a step event is queued for every replica step). :func:`seed` fills a run's queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from kvbudget.errors import ConfigError
from kvbudget.sim.drive_types import DriveOptions, RequestFeed, ScaleOut
from kvbudget.sim.events import PRIO_ARRIVAL, PRIO_SAMPLE, PRIO_SCALE, EventQueue
from kvbudget.sim.lifecycle import Crash, ScaleIn
from kvbudget.sim.replica import Replica
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.stepped import SteppedReplica

__all__ = [
    "SAMPLE",
    "Arrival",
    "DriveEvent",
    "Rearrival",
    "Sample",
    "ScaleInDeadline",
    "StepDue",
    "next_sample_s",
    "seed",
]


class Arrival(NamedTuple):
    """A request of :meth:`Driver.run`'s stream arrives (the next one is pulled then)."""

    request: EngineRequest


class Rearrival(NamedTuple):
    """A retried or migrated request arrives again: routed, nothing is pulled."""

    request: EngineRequest


class StepDue(NamedTuple):
    """Replica ``replica`` steps; stale (superseded) unless ``gen`` is still its ``step_gen``."""

    replica: int
    gen: int


class ScaleInDeadline(NamedTuple):
    """A scale-in's grace is over: what is left on its replica is cancelled or migrated."""

    scale_in: ScaleIn


class Sample(NamedTuple):
    """Sample every replica's state (KV usage, running, waiting)."""


SAMPLE = Sample()

DriveEvent = Arrival | Rearrival | StepDue | ScaleOut | ScaleIn | ScaleInDeadline | Crash | Sample


def seed(
    queue: EventQueue[DriveEvent],
    feed: RequestFeed,
    replicas: Sequence[SteppedReplica[Any]],
    opts: DriveOptions,
    scale_out: Iterable[ScaleOut],
    events: Iterable[ScaleIn | Crash],
) -> None:
    """A run's first events: its first arrival (closed loop: ``concurrency`` of them), the
    scale-outs, the scale-ins and crashes (checked against ``replicas``) and the first sample."""
    closed = feed.closed
    if closed is not None:
        if closed < 1:
            raise ConfigError(f"concurrency: must be >= 1, got {closed}", field="concurrency")
        for client in range(closed):
            req = feed.pull()
            if req is None:
                break
            at = req.arrival_s + client * opts.stagger_s if opts.stagger_s else req.arrival_s
            queue.push(at, PRIO_ARRIVAL, Arrival(req))
    else:
        first = feed.pull()
        if first is not None:
            queue.push(first.arrival_s, PRIO_ARRIVAL, Arrival(first))
    for scale in scale_out:
        queue.push(scale.at_s, PRIO_SCALE, scale)
    for event in events:
        if event.replica >= len(replicas):
            raise ConfigError(
                f"{type(event).__name__.lower()}: replica {event.replica} does not exist "
                f"(there are {len(replicas)}); give an index from 0",
                field="replica",
            )
        rep = replicas[event.replica]
        if not isinstance(rep, Replica):
            raise ConfigError(
                f"scale_in/crash: modelled for the paged replica only, not {type(rep).__name__}",
                field="events",
            )
        if rep.fast is not None:
            raise ConfigError(
                "scale_in/crash: the replica runs the lazy-decode fast path; build it with "
                "fast_path=False",
                field="fast_path",
            )
        queue.push(event.at_s, PRIO_SCALE, event)
    if opts.sample_every_s:
        queue.push(opts.start_s, PRIO_SAMPLE, SAMPLE)


def next_sample_s(
    replicas: Sequence[SteppedReplica[Any]],
    queue: EventQueue[DriveEvent],
    every_s: float | None,
    now_s: float,
) -> float | None:
    """When the sample after the one at ``now_s`` is due (``None``: nothing is left to run)."""
    if not (any(r.has_work() for r in replicas) or len(queue)):
        return None
    assert every_s is not None
    at = now_s + every_s
    if not any(r.has_work() for r in replicas):
        # idle until the next event: one sample there, not one per interval of an idle gap
        # (a tiny rate would otherwise ask for unbounded samples)
        at = max(at, queue.peek_time() or at)
    return at
