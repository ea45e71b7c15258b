"""The engine of ``kvbudget serve``: an async shell over the simulator's one driver.

The replica is the one every simulated path builds (``kvbudget.sim.fromplan``, through
``serve.build``) and it is stepped by the one driver, :class:`kvbudget.sim.driver.Driver`,
through its step-wise API: the code ``Driver.run`` uses for the cluster, accept's simulated
target and the audit's probe (``_route`` admits or refuses, ``_step`` steps the replica and
hands out what finished). This module only adds the wall clock and the queues of the clients:

* the driver's time is the wall clock since :meth:`RealTimeEngine.start` times ``speedup``;
* a request is submitted when its client sends it (``Driver.submit``: admitted or refused at
  once; a refusal is raised, the server answers 400);
* one asyncio task waits until the next step is due (``Driver.next_event_s``) or a submission
  wakes it, runs the step at the current time (``Driver.step``: a step starts when the loop
  gets to it, after HTTP handling), sleeps until the step's end (its simulated duration
  divided by ``speedup``) and hands each of the step's tokens to the queue of its request;
* a client that disconnects aborts its request (``Driver.abort``: its blocks are freed at
  once); tokens still in flight for it are dropped.

A step that raises (a simulator bug) ends every request in flight with an error, and the server
keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable

from kvbudget.errors import ConfigError
from kvbudget.sim.driver import Driver
from kvbudget.sim.engine import EngineCore, TokenOutput
from kvbudget.sim.replica import Replica
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.router import Router

#: a queue item: a token, or None when the request ended without one more token (abort)
TokenQueue = asyncio.Queue[TokenOutput | None]


def _keep_nothing(*_args: object) -> None:
    """A server forgets finished requests (the client has its tokens) and answers a refusal
    itself (``Driver.submit`` returns it)."""


class RealTimeEngine:
    """Drives one replica on the wall clock (``speedup`` > 1 runs faster than real time)."""

    def __init__(
        self,
        replica: Replica,
        *,
        speedup: float = 1.0,
        timing_name: str = "unknown",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if speedup <= 0:
            raise ValueError(f"speedup={speedup} must be > 0")
        if replica.fast is not None:
            raise ConfigError(
                "serve: the replica runs the lazy-decode fast path, which streams no tokens; "
                "build it with fast_path=False (serve.build does)",
                field="fast_path",
            )
        self.replica = replica
        self.driver = Driver(
            [replica], Router("round_robin"), on_finish=_keep_nothing, on_reject=_keep_nothing
        )
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

    @property
    def core(self) -> EngineCore:
        """The replica's engine core (stats, prefix-cache reset)."""
        return self.replica.core

    def sim_now_s(self) -> float:
        return (self._clock() - self._start) * self.speedup

    async def start(self) -> None:
        if self._task is None:
            # the driver's clock goes on from where it is (0 on the first start)
            self._start = self._clock() - self.driver.now_s / self.speedup
            self._task = asyncio.create_task(self._loop(), name="kvbudget-serve-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for rid in list(self._queues):
            self.abort(rid)

    def submit(self, req: EngineRequest) -> TokenQueue:
        """Add a request now (``ConfigError`` if it can never fit); returns its token queue."""
        refusal = self.driver.submit(req, self.sim_now_s())
        if refusal is not None:
            raise refusal
        queue: TokenQueue = asyncio.Queue()
        self._queues[req.request_id] = queue
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its blocks (``False`` if it had already finished)."""
        queue = self._queues.pop(request_id, None)
        freed = self.driver.abort(request_id)
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

    async def _wait(self, timeout_s: float | None) -> None:
        """Until a submission (or ``timeout_s`` of wall time)."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout_s)

    async def _loop(self) -> None:
        driver = self.driver
        while True:
            due_s = driver.next_event_s()
            if due_s is None:  # idle: the next submission starts a step
                await self._wait(None)
                continue
            now_s = self.sim_now_s()
            if due_s > now_s:  # e.g. only KV reloads in flight: wait for them or an arrival
                await self._wait((due_s - now_s) / self.speedup)
                continue
            try:
                out = driver.step(now_s)
            except Exception as exc:  # a simulator bug must not hang every client
                self.error = f"{type(exc).__name__}: {exc}"
                print(f"kvbudget serve: engine step failed: {self.error}", file=sys.stderr)
                for rid in list(self._queues):
                    self.abort(rid)
                await asyncio.sleep(0.01)
                continue
            if out.replica is None:
                continue  # a superseded step event
            self.num_steps += 1
            # the step's tokens exist at its end; sleeping also lets the HTTP handlers run
            await asyncio.sleep(max(0.0, (out.end_s - self.sim_now_s()) / self.speedup))
            for tok in out.outputs:
                queue = self._queues.get(tok.request_id)
                if queue is not None:
                    queue.put_nowait(tok)
                    if tok.finished:
                        self._queues.pop(tok.request_id, None)
