"""The ``http`` and ``serve`` targets: an OpenAI-compatible endpoint driven by the load runner.

``http``: a real engine at ``target.base_url`` (plus ``target.metrics_url`` for KV usage, queue
and prefix-cache counters); figures are ``measured`` and name the engine the server reports.

``serve``: kvbudget's own embedded engine server (``kvbudget serve``) started as a subprocess
on 127.0.0.1 with the plan's model, GPU and limits, then driven over HTTP like ``http``. The
engine behind it is the simulator, so its figures are labelled ``simulated`` and its text is
synthetic (quality untested).

The event loop is owned by the CLI: the target is given ``run_async`` (``asyncio.run`` at the
edge) and calls it for the start-up probe, each metrics scrape and each cell. Prompts and outputs are kept in memory only for quality
checks; records written by accept carry hashes unless ``--keep-prompts``.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from kvbudget.accept.request_keys import RequestKey
from kvbudget.accept.targets.base import CellRun, TargetInfo
from kvbudget.engine_name import KVBUDGET_SERVE
from kvbudget.errors import TargetError
from kvbudget.load.client import OpenAIClient
from kvbudget.load.config import RunConfig
from kvbudget.load.engine_report import EngineReport, read_engine_report
from kvbudget.load.identity import server_identity
from kvbudget.load.prometheus import parse_exposition
from kvbudget.load.run import run_load
from kvbudget.load.run_dir import METRICS_FILE, REQUESTS_FILE
from kvbudget.load.runner import StopWhen
from kvbudget.load.urls import route_url
from kvbudget.records import MetricSample, RecordSource, RequestRecord, read_jsonl
from kvbudget.safety.procs import child_preexec
from kvbudget.safety.tempdir import private_tempdir
from kvbudget.workload.request import PlannedRequest

RunAsync = Callable[[Coroutine[Any, Any, Any]], Any]
SERIES = {
    "kv_usage_ratio": "kv_usage",
    "requests_running": "num_running",
    "requests_waiting": "num_waiting",
}
COUNTERS = {
    "prefix_cache_queries_tokens": "prefix_queries_tokens",
    "prefix_cache_hits_tokens": "prefix_hits_tokens",
    "preemptions": "preemptions",
}
CONTEXT_WORDS = ("maximum context length", "max_model_len", "too long", "exceeds")


def capacity_error_of(records: Sequence[RequestRecord]) -> str | None:
    """An OOM, or a 400 that says the request does not fit, is a capacity error."""
    for rec in records:
        text = (rec.error_excerpt or "").lower()
        if rec.error_kind == "oom":
            return f"out of memory: {rec.error_excerpt}"
        if rec.http_status == 400 and any(w in text for w in CONTEXT_WORDS):
            return f"request refused as too long: {rec.error_excerpt}"
    return None


#: lock field -> EngineReport field the engine reports it in
LOCK_FROM_REPORT = {
    "max_model_len": "max_model_len",
    "block_size": "block_size",
    "kv_dtype": "cache_dtype",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "prefix_caching.enabled": "enable_prefix_caching",
    "max_num_seqs": "total_slots",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
}


def observed_lock_fields(report: EngineReport) -> dict[str, tuple[Any, str]]:
    """Lock fields the engine itself reported, with the endpoint/label they came from."""
    reported = report.reported()
    out: dict[str, tuple[Any, str]] = {}
    for lock_field, name in LOCK_FROM_REPORT.items():
        if name in reported:
            value, source = reported[name]
            out[lock_field] = (value, f"engine-reported ({source})")
    return out


def _is_checkpoint(request_id: str) -> bool:
    """Does this request carry a quality checkpoint's prompt (its output is judged)?"""
    return RequestKey.decode(request_id).checkpoint is not None


class HttpTarget:
    """Drives one OpenAI-compatible endpoint with ``load.run.run_load``."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        run_async: RunAsync,
        info: TargetInfo | None = None,
        metrics_url: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 120.0,
        keep_prompts: bool = False,
        source: RecordSource = "measured",
        seed: int = 0,
        hardware: str | None = None,
        scrape_interval_s: float = 1.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.scrape_interval_s = scrape_interval_s
        self.model = model
        self.run_async = run_async
        self.metrics_url = metrics_url
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.keep_prompts = keep_prompts
        self.source: RecordSource = source
        self.seed = seed
        self.hardware = hardware or "not reported over HTTP"
        self._info = info or self._probe()

    def _probe(self) -> TargetInfo:
        metrics_url = self.metrics_url

        async def probe() -> tuple[dict[str, Any], EngineReport]:
            async with OpenAIClient(self.base_url, concurrency=1, timeout_s=10.0) as client:
                ident = await server_identity(client)
                return ident, await read_engine_report(client, metrics_url)

        ident, report = self.run_async(probe())
        if ident.get("models_status") in (0, None):
            raise TargetError(
                f"target.base_url: cannot reach {route_url(self.base_url, '/v1/models')}; check the URL and "
                "that the server is up"
            )
        engine = str(ident.get("engine") or "unknown")
        version = ident.get("engine_version")
        observed: dict[str, tuple[Any, str]] = {"engine.name": (engine, "/v1/models, /version")}
        if version:
            observed["engine.version"] = (str(version), "/version")
        models = ident.get("models") or []
        if models and isinstance(models[0], dict):
            root = models[0].get("root") or models[0].get("id")
            if root:
                observed["model.id"] = (str(root), "/v1/models (root)")
        observed.update(observed_lock_fields(report))
        report_json = report.model_dump(mode="json", exclude_none=True)
        if engine == KVBUDGET_SERVE:
            # kvbudget's own simulator behind HTTP: its step times and text are simulated, so
            # nothing it returns is a measurement and quality cannot be judged on its text
            timing = (ident.get("version") or {}).get("timing_model")
            self.source = "simulated"
            return TargetInfo(
                kind="http",
                source="simulated",
                label=f"simulated (kvbudget serve at {self.base_url}, timing {timing})",
                timing_model=str(timing) if timing else None,
                engine=engine,
                engine_version=str(version) if version else None,
                hardware=f"simulated: {self.hardware}",
                observed=observed,
                synthetic_text=True,
                engine_report=report_json,
            )
        return TargetInfo(
            kind="http",
            source="measured",
            label=f"measured ({engine} {version or ''} at {self.base_url})",
            engine=engine,
            engine_version=str(version) if version else None,
            hardware=self.hardware,
            observed=observed,
            engine_report=report_json,
        )

    @property
    def info(self) -> TargetInfo:
        return self._info

    def idle_baseline(self) -> dict[str, float]:
        """KV usage, running and waiting from one scrape of ``metrics_url`` ({} if unknown)."""
        if not self.metrics_url:
            return {}
        url = self.metrics_url

        async def scrape() -> str | None:
            import aiohttp

            timeout = aiohttp.ClientTimeout(total=10)
            try:
                async with (
                    aiohttp.ClientSession(timeout=timeout) as session,
                    session.get(url) as resp,
                ):
                    return await resp.text() if resp.status == 200 else None
            except (aiohttp.ClientError, TimeoutError):
                return None

        text = self.run_async(scrape())
        if text is None:
            return {}
        try:
            samples = parse_exposition(text, 0.0)
        except ValueError:
            return {}
        return {SERIES[s.name]: s.value for s in samples if s.name in SERIES and not s.labels}

    def close(self) -> None:
        return None

    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
        stop_when: StopWhen | None = None,
    ) -> CellRun:
        """Run ``requests``; ``stop_when`` judges each finished record and stops the cell
        early (:func:`kvbudget.load.run.run_load`)."""
        if not requests:
            return CellRun(records=[], duration_s=0.0)
        closed = closed_loop_concurrency is not None
        cfg = RunConfig(
            base_url=self.base_url,
            model=self.model,
            shape="closed" if closed else "planned",
            concurrency=closed_loop_concurrency or 1,
            num_requests=len(requests),
            duration_s=duration_s if closed else None,
            timeout_s=self.timeout_s,
            # text is recorded only when asked, or for the quality checkpoints judged below
            keep_prompts=self.keep_prompts or any(_is_checkpoint(r.request_id) for r in requests),
            api_key_env=self.api_key_env,
            metrics_url=self.metrics_url,
            scrape_interval_s=self.scrape_interval_s,
            seed=self.seed,
        )
        started = time.perf_counter()
        # private (0700) and removed on every exit path, SIGKILL included
        with private_tempdir("kvbudget-accept-") as out:
            doc = self.run_async(
                run_load(cfg, out_dir=out, planned=list(requests), stop_when=stop_when)
            )
            raw = read_jsonl(out / REQUESTS_FILE, RequestRecord).items
            metrics = read_jsonl(out / METRICS_FILE, MetricSample).items if self.metrics_url else []
        outputs = {r.request_id: r.output_text or "" for r in raw if _is_checkpoint(r.request_id)}
        keep = self.keep_prompts
        records = [
            r.model_copy(
                update={
                    "cell_id": cell_id,
                    "warmup": warmup,
                    "source": self.source,
                    "prompt_text": r.prompt_text if keep else None,
                    "output_text": r.output_text if keep else None,
                }
            )
            for r in raw
        ]
        samples = [
            MetricSample(timestamp_s=s.timestamp_s, name=SERIES[s.name], value=s.value)
            for s in metrics
            if s.name in SERIES
        ]
        counters: dict[str, float] = {}
        for name, key in COUNTERS.items():
            values = [s.value for s in metrics if s.name == name]
            if len(values) >= 2:
                counters[key] = values[-1] - values[0]
        after = [s.value for s in samples if s.name == "kv_usage"]
        return CellRun(
            records=records,
            duration_s=time.perf_counter() - started,
            samples=samples,
            capacity_error=capacity_error_of(records),
            counters=counters,
            kv_usage_after_drain=after[-1] if after else None,
            outputs=outputs,
            show_outputs=keep,
            stopped_early=doc.accounting.get("stopped_early"),
        )


class ServeTarget(HttpTarget):
    """``kvbudget serve`` in a subprocess on 127.0.0.1, driven over HTTP."""

    def __init__(
        self,
        *,
        serve_args: list[str],
        model: str,
        run_async: RunAsync,
        info: TargetInfo,
        timeout_s: float = 120.0,
        keep_prompts: bool = False,
        startup_timeout_s: float = 60.0,
    ) -> None:
        cmd = [
            sys.executable,
            "-m",
            "kvbudget",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--model",
            model,
            *serve_args,
        ]
        # the serve child gets SIGKILL when accept dies (kill -9 included); stderr goes to an
        # anonymous file (a full pipe would block the child); stdout is read by a thread so
        # the start deadline holds even when the child prints nothing
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            preexec_fn=child_preexec,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(
            target=self._read_stdout, name="kvbudget-serve-stdout", daemon=True
        ).start()
        url = self._wait_url(startup_timeout_s)
        super().__init__(
            base_url=url,
            model=model,
            run_async=run_async,
            info=info,
            metrics_url=f"{url}/metrics",
            timeout_s=timeout_s,
            keep_prompts=keep_prompts,
            source="simulated",
        )

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # end of output: the child closed stdout or exited

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = self._stderr.read().strip().splitlines()
        return lines[-1] if lines else f"exit code {self.proc.returncode}"

    def _wait_url(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is not None and line.startswith("http://"):
                return line.strip()
            if line is None:
                try:
                    self.proc.wait(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    break
                tail = self._stderr_tail()
                self.close()
                raise TargetError(
                    "target.kind serve: kvbudget serve exited before listening: " + tail
                )
        self.close()
        raise TargetError(
            f"target.kind serve: no URL from kvbudget serve within {timeout_s:g} s "
            "(it printed none); raise the start-up time or run `kvbudget serve` by hand to see why"
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._stderr.close()
