"""Drive the simulator's ``EngineCore`` in real time for the HTTP server.

One asyncio task steps the core: it calls ``core.step(sim_now)``, sleeps the step's simulated
duration (divided by ``speedup``), then hands each token to the queue of its request. With
nothing to do it waits for the next submission. ``abort`` removes a request from the core at
once (its blocks are freed); tokens still in flight for it are dropped.

Why this loop and not :class:`kvbudget.sim.driver.Driver` (the driver of every other simulated
path): the replica is the same (built by ``kvbudget.sim.fromplan``, ``serve.build``), but
``Driver.run`` is a virtual-time loop over a request stream it pulls in arrival order, and a
server has none of what that needs:

* the next arrival is unknown until a client sends it: ``Driver.run`` pulls the next request
  as soon as it handles an arrival, so a pull that waited for the next client would stop
  every step of the requests already running until someone else connects;
* a client that disconnects cancels its request at once (``abort``); the driver has no cancel
  event, only the planned ``cancel_after_tokens`` of a ``PlannedRequest``;
* tokens are streamed as each step ends (``StepResult.outputs`` to each request's queue); the
  driver hands a request out only when it finishes (``on_finish``);
* time is the wall clock scaled by ``speedup`` (a step starts when the loop gets to it, after
  HTTP handling), not the driver's event times.

Driving serve through the driver would need an incremental API on it (submit at a time,
abort, one step returning its outputs) with ``Driver.run`` rebuilt on top; until then this
loop calls the same ``EngineCore.step`` the replica's explicit path calls (serve builds its
replica with ``fast_path=False`` and no KV tiers, so ``Replica.step`` would add nothing but
the planned cancellation, which HTTP requests do not carry).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from kvbudget.sim.engine import EngineStats, StepResult, TokenOutput


class EngineCoreLike(Protocol):
    """The part of ``kvbudget.sim.engine.EngineCore`` (brief, interface 7) the server uses."""

    def add_request(self, req: Any) -> Any: ...
    def abort_request(self, request_id: str) -> bool: ...
    def has_work(self) -> bool: ...
    def step(self, now_s: float) -> StepResult: ...
    def reset_prefix_cache(self) -> bool: ...
    def stats(self) -> EngineStats: ...


#: a queue item: a token, or None when the request ended without one more token (abort)
TokenQueue = asyncio.Queue[TokenOutput | None]


class RealTimeEngine:
    """Steps an engine core on the wall clock (``speedup`` > 1 runs faster than real time)."""

    def __init__(
        self,
        core: EngineCoreLike,
        *,
        speedup: float = 1.0,
        timing_name: str = "unknown",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if speedup <= 0:
            raise ValueError(f"speedup={speedup} must be > 0")
        self.core = core
        self.speedup = speedup
        self.timing_name = timing_name
        self._clock = clock
        self._start = clock()
        self._queues: dict[str, TokenQueue] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.num_aborted = 0
        self.num_steps = 0
        #: the last engine failure (requests in flight then end with an error), or None
        self.error: str | None = None

    def sim_now_s(self) -> float:
        return (self._clock() - self._start) * self.speedup

    async def start(self) -> None:
        if self._task is None:
            self._start = self._clock()
            self._task = asyncio.create_task(self._loop(), name="kvbudget-serve-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for rid in list(self._queues):
            self.abort(rid)

    def submit(self, req: Any) -> TokenQueue:
        """Add a request (``ConfigError`` if it can never fit); returns its token queue."""
        queue: TokenQueue = asyncio.Queue()
        self.core.add_request(req)
        self._queues[req.request_id] = queue
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its blocks (``False`` if it had already finished)."""
        queue = self._queues.pop(request_id, None)
        freed = self.core.abort_request(request_id)
        if queue is not None:
            queue.put_nowait(None)
        if freed:
            self.num_aborted += 1
        return freed

    def release(self, request_id: str) -> None:
        """Forget a finished request's queue."""
        self._queues.pop(request_id, None)

    @property
    def num_open(self) -> int:
        return len(self._queues)

    async def _loop(self) -> None:
        core = self.core
        while True:
            if not core.has_work():
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                result = core.step(self.sim_now_s())
            except Exception as exc:  # a simulator bug must not hang every client
                self.error = f"{type(exc).__name__}: {exc}"
                print(f"kvbudget serve: engine step failed: {self.error}", file=sys.stderr)
                for rid in list(self._queues):
                    self.abort(rid)
                await asyncio.sleep(0.01)
                continue
            self.num_steps += 1
            if result.duration_s > 0:
                await asyncio.sleep(result.duration_s / self.speedup)
            elif not result.outputs:
                await asyncio.sleep(0.001)  # nothing computable now (e.g. KV reloading)
            for tok in result.outputs:
                queue = self._queues.get(tok.request_id)
                if queue is not None:
                    queue.put_nowait(tok)
                    if tok.finished:
                        self._queues.pop(tok.request_id, None)
