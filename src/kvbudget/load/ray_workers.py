"""``bench --ray``: the load's workers as Ray actors, spread over the cluster's nodes.

The same life cycle as :class:`kvbudget.load.workers.WorkerPool` (``start`` -> ``go(t0)`` ->
``collect`` -> ``terminate``) and the same split of the load (request ``i`` goes to worker
``i mod N``; closed loop splits the concurrency), with three differences that come from
running on other machines:

* **Clocks.** Another node's ``perf_counter`` has another origin. Before the start, each
  actor's clock is read ``CLOCK_PINGS`` times; its offset is ``remote - (sent + received) / 2``
  of the round trip with the smallest RTT (the NTP estimate; its error is at most RTT / 2,
  both recorded). Each actor then starts at ``t0 + offset`` on its own clock, so its records
  (seconds since its start) lie on the driver's timeline.
* **One records file.** Actors keep finished records in memory; the driver drains them every
  ``DRAIN_EVERY_S`` into the one ``requests.jsonl`` (one ``write()`` per record).
* **A lost worker** (its node or process died) is reported with the reason; every record it had
  finished and the driver had drained is kept (at most the last ``DRAIN_EVERY_S`` of it is
  lost), the other workers finish their shares, and ``--resume`` sends what is missing.

Per-worker accounting (``accounting()``): offset, RTT, node, sent and the records by status,
so ``sent = ok + error + cancelled`` is checked worker by worker; a lost worker's ``sent`` died
with it and is reported as unknown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvbudget.errors import TargetError
from kvbudget.load.config import RunConfig
from kvbudget.load.runner import WorkerResult, run_worker
from kvbudget.ray_support import ensure_ray
from kvbudget.records import JsonlWriter, RequestRecord
from kvbudget.workload.request import PlannedRequest

CLOCK_PINGS = 8
DRAIN_EVERY_S = 0.2
WORKER_READY_TIMEOUT_S = 180.0


def estimate_offset(
    local_clock: Callable[[], float], remote_clock: Callable[[], float], pings: int = CLOCK_PINGS
) -> tuple[float, float]:
    """(offset_s, rtt_s) of ``remote_clock`` against ``local_clock`` (min-RTT round trip).

    ``remote = local + offset``; the true offset lies within ``offset +- rtt / 2``.
    """
    best: tuple[float, float] | None = None
    for _ in range(max(1, pings)):
        sent = local_clock()
        remote = remote_clock()
        received = local_clock()
        rtt = received - sent
        offset = remote - (sent + received) / 2.0
        if best is None or rtt < best[1]:
            best = (offset, rtt)
    assert best is not None
    return best


class _BufferWriter(JsonlWriter):
    """A ``JsonlWriter`` that keeps the lines in memory for the driver to drain."""

    def __init__(self) -> None:  # no file: the driver owns the one records file
        self.lines: list[str] = []
        self.num_written = 0

    def write(self, item: Any) -> None:
        self.lines.append(item.model_dump_json())
        self.num_written += 1

    def close(self) -> None:
        return None


class LoadActor:
    """One load worker (wrapped by ``ray.remote`` at start; an async actor)."""

    def __init__(self) -> None:
        self.writer = _BufferWriter()

    async def clock(self) -> float:
        return time.perf_counter()

    async def node(self) -> str:
        import socket

        return socket.gethostname()

    async def run(
        self,
        cfg_json: str,
        planned: Sequence[PlannedRequest] | None,
        worker: int,
        num_workers: int,
        segment: int,
        skip: set[str],
        t0_local: float,
        api_key: str | None,
    ) -> WorkerResult:
        cfg = RunConfig.model_validate_json(cfg_json)
        return await run_worker(
            cfg,
            writer=self.writer,
            t0=t0_local,
            worker=worker,
            num_workers=num_workers,
            segment=segment,
            planned=planned,
            skip_ids=skip,
            api_key=api_key,
        )

    async def drain(self) -> list[str]:
        lines, self.writer.lines = self.writer.lines, []
        return lines


class RayWorkerPool:
    """Start actors, estimate their clocks, release them at ``t0``, merge their records."""

    def __init__(
        self,
        cfg: RunConfig,
        planned: Sequence[PlannedRequest] | None,
        num_workers: int,
        segment: int,
        skip: set[str],
        path: Path,
        api_key: str | None,
        *,
        ray_address: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.planned = planned
        self.num_workers = num_workers
        self.segment = segment
        self.skip = skip
        self.path = path
        self.api_key = api_key
        self.ray_address = ray_address
        self.ray: Any = None
        self.actors: list[Any] = []
        self.nodes: list[str] = []
        self.offsets_s: list[float] = []
        self.rtts_s: list[float] = []
        self.runs: list[Any] = []
        self.lost: dict[int, str] = {}
        self.recorded: list[dict[str, int]] = [{} for _ in range(num_workers)]
        self.results: dict[int, WorkerResult] = {}

    async def start(self, timeout_s: float = WORKER_READY_TIMEOUT_S) -> None:
        """Create the actors (spread over nodes) and estimate each one's clock offset."""
        ray = ensure_ray("kvbudget bench --ray", address=self.ray_address, num_cpus=None)
        self.ray = ray
        actor_cls = ray.remote(num_cpus=0, max_restarts=0, scheduling_strategy="SPREAD")(LoadActor)
        self.actors = [actor_cls.remote() for _ in range(self.num_workers)]
        try:
            self.nodes = await asyncio.wait_for(
                asyncio.to_thread(ray.get, [a.node.remote() for a in self.actors]), timeout_s
            )
        except Exception as exc:  # includes the timeout
            self.terminate()
            raise TargetError(
                f"{self.num_workers} Ray load worker(s) did not start within {timeout_s:g} s "
                f"({type(exc).__name__}); check the cluster (ray status) or lower --workers"
            ) from None
        for actor in self.actors:

            def remote_clock(a: Any = actor) -> float:
                return float(ray.get(a.clock.remote()))

            offset, rtt = await asyncio.to_thread(estimate_offset, time.perf_counter, remote_clock)
            self.offsets_s.append(offset)
            self.rtts_s.append(rtt)

    def go(self, t0: float) -> None:
        """Start every actor at ``t0`` of the driver's clock (its own clock: ``t0 + offset``)."""
        cfg_json = self.cfg.model_dump_json()
        self.runs = [
            actor.run.remote(
                cfg_json,
                self.planned,
                k,
                self.num_workers,
                self.segment,
                self.skip,
                t0 + self.offsets_s[k],
                self.api_key,
            )
            for k, actor in enumerate(self.actors)
        ]

    def _merge(self, writer: JsonlWriter, k: int, lines: list[str]) -> None:
        for line in lines:
            record = RequestRecord.model_validate_json(line)
            writer.write(record)
            counts = self.recorded[k]
            counts[record.status] = counts.get(record.status, 0) + 1

    async def _drain(self, writer: JsonlWriter, workers: list[int]) -> None:
        """Merge the finished records of ``workers`` (one round trip each, all at once)."""
        refs = {k: self.actors[k].drain.remote() for k in workers if k not in self.lost}
        for k, ref in refs.items():
            try:
                lines = await asyncio.to_thread(self.ray.get, ref)
            except Exception as exc:  # the actor is gone: what was drained before stays
                self._mark_lost(k, exc)
                continue
            self._merge(writer, k, lines)

    def _mark_lost(self, k: int, exc: BaseException) -> None:
        if k not in self.lost:
            text = " ".join(str(exc).split())
            self.lost[k] = f"{type(exc).__name__}: {text[:200]}"

    async def collect(self, progress_lines: Callable[[int], None] | None) -> list[WorkerResult]:
        """Drain records until every actor is done or lost; the results of those that finished."""
        ray = self.ray
        open_runs = {ref: k for k, ref in enumerate(self.runs)}
        with JsonlWriter(self.path) as writer:
            while open_runs:
                done, _ = await asyncio.to_thread(
                    ray.wait, list(open_runs), num_returns=len(open_runs), timeout=DRAIN_EVERY_S
                )
                await self._drain(writer, sorted(set(open_runs.values())))
                finished = []
                for ref in done:
                    k = open_runs.pop(ref)
                    try:
                        self.results[k] = ray.get(ref)
                    except Exception as exc:
                        self._mark_lost(k, exc)
                        continue
                    finished.append(k)
                await self._drain(writer, finished)  # the records after the last drain
                for ref, k in list(open_runs.items()):
                    if k in self.lost:
                        open_runs.pop(ref)
                if progress_lines is not None:
                    progress_lines(sum(sum(c.values()) for c in self.recorded))
        return [self.results[k] for k in sorted(self.results)]

    def accounting(self) -> dict[str, Any]:
        """Per-worker clocks and accounting, for the run's ``accounting`` section."""
        per_worker = []
        for k in range(self.num_workers):
            counts = self.recorded[k]
            res = self.results.get(k)
            recorded = sum(counts.values())
            per_worker.append(
                {
                    "worker": k,
                    "node": self.nodes[k] if k < len(self.nodes) else None,
                    "clock_offset_s": self.offsets_s[k] if k < len(self.offsets_s) else None,
                    "clock_rtt_s": self.rtts_s[k] if k < len(self.rtts_s) else None,
                    "sent": None if res is None else res.sent,
                    "ok": counts.get("ok", 0),
                    "error": counts.get("error", 0),
                    "cancelled": counts.get("cancelled", 0),
                    "recorded": recorded,
                    "sent_equals_recorded": None if res is None else res.sent == recorded,
                    "lost": self.lost.get(k),
                }
            )
        return {
            "transport": "ray",
            "workers_lost": len(self.lost),
            "per_worker": per_worker,
        }

    def terminate(self) -> None:
        if self.ray is None:
            return
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # already gone
                continue
