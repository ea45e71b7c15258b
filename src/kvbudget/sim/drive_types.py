"""What :class:`kvbudget.sim.driver.Driver` is given and gives back (re-exported there)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, TypeVar

from kvbudget.errors import ConfigError, KvbudgetError
from kvbudget.sim.engine import TokenOutput
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest, as_engine_request
from kvbudget.sim.request import RequestIn as RequestIn  # the driver's input, re-exported
from kvbudget.sim.stepped import F, SteppedReplica

#: the engine a driver steps (:mod:`kvbudget.sim.stepped`)
R = TypeVar("R", bound="SteppedReplica[Any]")

#: a request ended (``F``: what the engine hands out, e.g. the paged engine's ``SimRequest``)
OnFinish = Callable[[F, R], None]
OnReject = Callable[[EngineRequest, R, KvbudgetError], None]
OnNotRun = Callable[[EngineRequest], None]
OnStep = Callable[[R, int, float, float], None]
OnSample = Callable[[R, float], None]
BuildReplica = Callable[[ReplicaSetup, float], R]


def sample_replica(rep: SteppedReplica[Any], now_s: float) -> None:
    """The default ``on_sample``: the replica keeps its own samples."""
    rep.sample(now_s)


def no_build(setup: ReplicaSetup, ready_s: float) -> NoReturn:
    """The default ``build``: a driver given no builder cannot scale out."""
    raise ConfigError("scale_out: this driver was given no replica builder", field="scale_out")


@dataclass(frozen=True, slots=True)
class ScaleOut:
    """Add a replica at ``at_s``; it serves from ``at_s + cold_start_s`` with a cold cache.

    ``warmup_s``: the router then shifts traffic to it gradually: during the warm-up a request
    may go to it only if its request id's share (crc32 / 2**32) is below the elapsed fraction
    of the warm-up, so about that fraction of the traffic is eligible for it.
    """

    at_s: float
    setup: ReplicaSetup
    cold_start_s: float = 60.0
    warmup_s: float = 0.0


@dataclass(frozen=True, slots=True)
class DriveOptions:
    """How one :meth:`Driver.run` feeds its requests and when it stops."""

    #: closed loop: this many requests in flight; the next one arrives when one finishes
    concurrency: int | None = None
    #: closed loop: no request is released once a step ends at or after this time
    admit_until_s: float | None = None
    #: stop at this simulated time; what is still in flight is left in the replicas
    max_simulated_s: float | None = None
    #: sample every replica's state this often (simulated seconds), from the first event on
    sample_every_s: float | None = None
    #: first sample time (the timeline's origin when driving several runs on one replica)
    start_s: float = 0.0
    #: a runaway guard: more engine steps than this raise ``SimulationError``
    max_steps: int | None = None
    #: closed loop: ``None``, ``vllm bench serve``'s client: a request released by a step
    #: reaches the engine after the next step has begun (``PRIO_RELEASED``). A number: it
    #: reaches the engine this long after the one it replaces ended (the client's turnaround:
    #: response, client, new request; the engine's ``ended_s``) and joins the first step that
    #: starts at or after then (llama.cpp's server loop; ``kvbudget calibrate``'s replays)
    turnaround_s: float | None = None
    #: closed loop: client ``i``'s first request arrives ``i * stagger_s`` after its own
    #: arrival time (load clients that do not all start in the same instant)
    stagger_s: float = 0.0


@dataclass(frozen=True, slots=True)
class DriveOutcome:
    """What one run did (its requests went to the callbacks)."""

    #: time of the last event handled (the horizon when it was reached)
    now_s: float
    #: end of the last engine step or the last arrival, whichever is later (``start_s`` when
    #: nothing happened): where the run's own timeline ends, samples aside
    last_activity_s: float
    num_events: int
    num_steps: int
    hit_horizon: bool
    num_arrived: int


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one :meth:`Driver.step` handled (``kind`` ``""``: nothing was due)."""

    #: the event: ``"step"`` (the only kind the step-wise API queues), or ``""`` when no
    #: event was due by ``start_s``
    kind: Literal["step", ""]
    start_s: float
    #: when the step's tokens exist (``start_s`` + its simulated duration); ``start_s`` when
    #: no replica stepped
    end_s: float
    #: index of the replica that stepped (``None``: none did, e.g. a superseded step event)
    replica: int | None = None
    #: the step's tokens, one per request that produced one (the explicit engine's
    #: ``StepResult.outputs``; a lazy-decode fast-path replica reports none)
    outputs: Sequence[TokenOutput] = ()
    #: requests that ended in this step (also given to ``on_finish``; the engine's ``F``, the
    #: paged replica's ``SimRequest``); a refusal is not a step's: :meth:`Driver.submit`
    #: returns it
    finished: Sequence[object] = ()


class RequestFeed:
    """:meth:`Driver.run`'s request stream: pulled in arrival order, open or closed loop.

    Closed loop (``concurrency``): that many requests in flight; each finished (or refused)
    request releases the next one, which arrives when the step that finished it ends (or at
    its own arrival time if that is later: requests with arrival times under a concurrency
    cap, as ``vllm bench serve --request-rate R --max-concurrency C`` sends them), until
    ``admit_until_s`` (if given) has passed.
    """

    __slots__ = ("admit_until", "closed", "last_arrival", "released", "stream")

    def __init__(self, requests: Iterable[RequestIn], opts: DriveOptions, released: int) -> None:
        self.stream: Iterator[RequestIn] = iter(requests)
        self.closed = opts.concurrency
        self.admit_until = opts.admit_until_s
        self.last_arrival = float("-inf")
        #: closed loop: finishes and refusals seen (each releases the next request)
        self.released = released

    def pull(self) -> EngineRequest | None:
        raw = next(self.stream, None)
        if raw is None:
            return None
        req = as_engine_request(raw)
        if req.arrival_s < self.last_arrival:
            raise ConfigError(
                f"request {req.request_id}: arrives at {req.arrival_s:g} s, before the "
                f"previous request ({self.last_arrival:g} s); a request stream must be in arrival "
                "order (sort it, or pass a list to kvbudget.sim.cluster.simulate)",
                field="requests",
            )
        self.last_arrival = req.arrival_s
        return req

    def refused(self, now_s: float) -> EngineRequest | None:
        """Closed loop: an arrival was refused at ``now_s``; it releases the next request
        (none once ``admit_until`` has passed)."""
        self.released += 1
        if self.admit_until is None or now_s < self.admit_until:
            return self.pull()
        return None

    def release(self, done: int, end_s: float) -> list[EngineRequest]:
        """Closed loop: ``done`` requests have finished or been refused by the step that ends
        at ``end_s``; each one not yet counted releases the next request (none once
        ``admit_until`` has passed). Returns the released requests (they arrive at ``end_s``)."""
        out: list[EngineRequest] = []
        admit_until = self.admit_until
        while self.released < done:
            self.released += 1
            if admit_until is not None and end_s >= admit_until:
                continue
            nxt = self.pull()
            if nxt is None:
                break
            out.append(nxt)
        self.released = done
        return out
