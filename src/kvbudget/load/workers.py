"""``--workers N``: client processes that share one start time and one JSONL file.

Each worker is a spawned process. It imports, tells the parent it is ready, waits for the
common start time ``t0`` (CLOCK_MONOTONIC, ``time.perf_counter`` on Linux, the same in every
process), then runs its share of the load (request ``i`` goes to worker ``i mod N``; closed
loop splits the concurrency) and appends its records to the shared ``requests.jsonl``
(``O_APPEND``, one ``write()`` per record). ``t0`` is chosen only once every worker is ready, so
a slow start never shows up as schedule lag.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvbudget.errors import TargetError
from kvbudget.load.config import RunConfig
from kvbudget.load.runner import WorkerResult, run_worker
from kvbudget.records import JsonlWriter
from kvbudget.safety.procs import die_with_parent
from kvbudget.safety.redact import register_secret
from kvbudget.workload.request import PlannedRequest

#: how long spawned workers may take to import and report ready
WORKER_READY_TIMEOUT_S = 120.0


def _worker_main(
    cfg_json: str,
    planned: Sequence[PlannedRequest] | None,
    worker: int,
    num_workers: int,
    segment: int,
    skip: set[str],
    path: str,
    api_key: str | None,
    conn: Any,
    queue: Any,
    parent_pid: int,
) -> None:
    """Entry point of a spawned worker process."""
    # SIGKILL when the parent dies: an orphan must never keep sending and recording
    die_with_parent(parent_pid)
    register_secret(api_key)
    cfg = RunConfig.model_validate_json(cfg_json)
    conn.send("ready")
    try:
        t0 = float(conn.recv())
    except EOFError:  # the parent gave up before the start
        return
    with JsonlWriter(Path(path)) as writer:
        result = asyncio.run(
            run_worker(
                cfg,
                writer=writer,
                t0=t0,
                worker=worker,
                num_workers=num_workers,
                segment=segment,
                planned=planned,
                skip_ids=skip,
                api_key=api_key,
            )
        )
    queue.put(result)


class WorkerPool:
    """Start workers, wait until they are ready, release them at ``t0``, gather results."""

    def __init__(
        self,
        cfg: RunConfig,
        planned: Sequence[PlannedRequest] | None,
        num_workers: int,
        segment: int,
        skip: set[str],
        path: Path,
        api_key: str | None,
    ) -> None:
        ctx = mp.get_context("spawn")
        self.path = path
        self.num_workers = num_workers
        self.queue = ctx.Queue()
        self.conns: list[Any] = []
        self.procs: list[Any] = []
        for k in range(num_workers):
            parent, child = ctx.Pipe()
            self.conns.append(parent)
            self.procs.append(
                ctx.Process(
                    target=_worker_main,
                    args=(
                        cfg.model_dump_json(),
                        planned,
                        k,
                        num_workers,
                        segment,
                        skip,
                        str(path),
                        api_key,
                        child,
                        self.queue,
                        os.getpid(),
                    ),
                    daemon=True,
                )
            )

    async def start(self, timeout_s: float = WORKER_READY_TIMEOUT_S) -> None:
        """Spawn every worker and wait until each has imported and said it is ready."""
        for p in self.procs:
            p.start()
        ready = [False] * self.num_workers
        deadline = time.monotonic() + timeout_s
        while not all(ready):
            for k, conn in enumerate(self.conns):
                if not ready[k] and conn.poll():
                    ready[k] = conn.recv() == "ready"
            if any(not p.is_alive() for p in self.procs) or time.monotonic() > deadline:
                self.terminate()
                raise TargetError(
                    f"{sum(ready)} of {self.num_workers} worker processes started within "
                    f"{timeout_s:g} s; lower --workers or check the machine's load"
                )
            await asyncio.sleep(0.02)

    def go(self, t0: float) -> None:
        """Tell every worker the common start time."""
        for conn in self.conns:
            conn.send(t0)

    async def collect(self, progress_lines: Callable[[int], None] | None) -> list[WorkerResult]:
        """Wait for every worker's result (progress: lines in the shared JSONL so far)."""
        results: list[WorkerResult] = []
        while len(results) < self.num_workers:
            while not self.queue.empty():
                results.append(self.queue.get())
            if progress_lines is not None and self.path.exists():
                progress_lines(self.path.read_bytes().count(b"\n"))
            if all(not p.is_alive() for p in self.procs) and self.queue.empty():
                break
            await asyncio.sleep(0.2)
        for p in self.procs:
            p.join(timeout=5)
        if len(results) < self.num_workers:
            codes = [p.exitcode for p in self.procs]
            raise TargetError(
                f"{self.num_workers - len(results)} of {self.num_workers} worker processes died "
                f"(exit codes {codes}); finished records are in {self.path}; rerun with --resume"
            )
        return results

    def terminate(self) -> None:
        for conn in self.conns:
            conn.close()
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=5)
