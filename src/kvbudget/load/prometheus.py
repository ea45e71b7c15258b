"""Scrape an engine's Prometheus ``/metrics`` and map it to one vocabulary.

Parsing uses ``prometheus_client``'s text parser. Each engine's series (vLLM current and older
names, SGLang, llama.cpp) maps to kvbudget's unified names below; ``docs/metrics-mapping.md``
has the table with sources. Samples land on the client's run timeline (seconds since the run's
``t0``, negative for the idle baseline taken before load). A failed scrape is recorded, never
fatal.

Unified names: ``kv_usage_ratio``, ``requests_running``, ``requests_waiting`` (gauges);
``prefix_cache_queries_tokens``, ``prefix_cache_hits_tokens``, ``preemptions``,
``prompt_tokens``, ``generation_tokens``, ``prompt_tokens_cached`` (counters);
``engine_ttft_seconds``, ``engine_itl_seconds``, ``engine_e2e_seconds``,
``engine_queue_seconds``, ``engine_prefill_seconds`` (histograms, as ``<name>_sum`` / ``_count`` / ``_bucket``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kvbudget.records import JsonlWriter, MetricSample

SeriesKind = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True, slots=True)
class Unified:
    name: str
    kind: SeriesKind
    #: how label sets of one scrape combine: "sum" (counts, tokens) or "max" (ratios)
    combine: Literal["sum", "max"] = "sum"


KV_USAGE = Unified("kv_usage_ratio", "gauge", "max")
RUNNING = Unified("requests_running", "gauge")
WAITING = Unified("requests_waiting", "gauge")
PREFIX_QUERIES = Unified("prefix_cache_queries_tokens", "counter")
PREFIX_HITS = Unified("prefix_cache_hits_tokens", "counter")
PREEMPTIONS = Unified("preemptions", "counter")
PROMPT_TOKENS = Unified("prompt_tokens", "counter")
GENERATION_TOKENS = Unified("generation_tokens", "counter")
CACHED_PROMPT_TOKENS = Unified("prompt_tokens_cached", "counter")
TTFT = Unified("engine_ttft_seconds", "histogram")
ITL = Unified("engine_itl_seconds", "histogram")
E2E = Unified("engine_e2e_seconds", "histogram")
QUEUE = Unified("engine_queue_seconds", "histogram")
PREFILL = Unified("engine_prefill_seconds", "histogram")

#: engine family name (as prometheus_client reports it: counters without ``_total``) -> unified
SERIES_MAP: dict[str, Unified] = {
    # vLLM V1 (vllm/v1/metrics/loggers.py), current names
    "vllm:kv_cache_usage_perc": KV_USAGE,
    "vllm:num_requests_running": RUNNING,
    "vllm:num_requests_waiting": WAITING,
    "vllm:prefix_cache_queries": PREFIX_QUERIES,
    "vllm:prefix_cache_hits": PREFIX_HITS,
    "vllm:num_preemptions": PREEMPTIONS,
    "vllm:prompt_tokens": PROMPT_TOKENS,
    "vllm:generation_tokens": GENERATION_TOKENS,
    "vllm:prompt_tokens_cached": CACHED_PROMPT_TOKENS,
    "vllm:time_to_first_token_seconds": TTFT,
    "vllm:inter_token_latency_seconds": ITL,
    "vllm:e2e_request_latency_seconds": E2E,
    "vllm:request_queue_time_seconds": QUEUE,
    "vllm:request_prefill_time_seconds": PREFILL,
    # vLLM older names (deprecated 0.9 / ~0.11)
    "vllm:gpu_cache_usage_perc": KV_USAGE,
    "vllm:gpu_prefix_cache_queries": PREFIX_QUERIES,
    "vllm:gpu_prefix_cache_hits": PREFIX_HITS,
    "vllm:time_per_output_token_seconds": ITL,
    # SGLang (srt/metrics/collector.py; --enable-metrics)
    "sglang:token_usage": KV_USAGE,
    "sglang:num_running_reqs": RUNNING,
    "sglang:num_queue_reqs": WAITING,
    "sglang:prompt_tokens": PROMPT_TOKENS,
    "sglang:generation_tokens": GENERATION_TOKENS,
    "sglang:cached_tokens": PREFIX_HITS,
    "sglang:time_to_first_token_seconds": TTFT,
    "sglang:inter_token_latency_seconds": ITL,
    "sglang:time_per_output_token_seconds": ITL,
    "sglang:e2e_request_latency_seconds": E2E,
    # llama.cpp server (--metrics)
    "llamacpp:prompt_tokens": PROMPT_TOKENS,
    "llamacpp:prompt_tokens_cached": PREFIX_HITS,
    "llamacpp:tokens_predicted": GENERATION_TOKENS,
    "llamacpp:requests_processing": RUNNING,
    "llamacpp:requests_deferred": WAITING,
    "llamacpp:kv_cache_usage_ratio": KV_USAGE,  # older llama.cpp builds only
}

#: where a unified series is DERIVED from two engine series (documented in metrics-mapping.md)
#: SGLang's prompt_tokens count every input token, so they are also the prefix-cache queries;
#: llama.cpp's prompt_tokens EXCLUDE cached tokens, so queries = prompt + cached.
DERIVED_QUERIES: dict[str, tuple[str, ...]] = {
    "sglang": ("sglang:prompt_tokens",),
    "llamacpp": ("llamacpp:prompt_tokens", "llamacpp:prompt_tokens_cached"),
}

UNIFIED_KINDS: dict[str, SeriesKind] = {u.name: u.kind for u in SERIES_MAP.values()}


def _base_name(name: str) -> str:
    return name.removesuffix("_sum").removesuffix("_count")


def _family_key(name: str, kind: str) -> str:
    if kind == "counter" and name.endswith("_total"):
        return name[: -len("_total")]
    return name


def parse_exposition(text: str, timestamp_s: float) -> list[MetricSample]:
    """Unified samples of one exposition text (label sets combined per unified name).

    Histograms keep ``_sum`` and ``_count`` (combined) and ``_bucket`` (per ``le``).
    Raises ``ValueError`` when the text is not Prometheus exposition format.
    """
    sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    raw_of: dict[str, str] = {}
    combine: dict[str, str] = {}
    engine_values: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        key = _family_key(fam.name, fam.type)
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            engine_key = key
            if fam.type == "counter" and s.name.endswith("_total"):
                engine_key = _family_key(s.name, "counter")
            engine_values[engine_key] = engine_values.get(engine_key, 0.0) + float(s.value)
            unified = SERIES_MAP.get(engine_key)
            if unified is None:
                continue
            name = unified.name
            labels: tuple[tuple[str, str], ...] = ()
            if unified.kind == "histogram":
                suffix = s.name[len(fam.name) :]
                if suffix not in ("_sum", "_count", "_bucket"):
                    continue
                name = unified.name + suffix
                if suffix == "_bucket":
                    labels = (("le", s.labels.get("le", "+Inf")),)
            k = (name, labels)
            raw_of[name] = engine_key
            combine[name] = unified.combine
            if k in sums and unified.combine == "max":
                sums[k] = max(sums[k], float(s.value))
            else:
                sums[k] = sums.get(k, 0.0) + float(s.value)
    out = [
        MetricSample(
            timestamp_s=timestamp_s,
            name=name,
            value=value,
            labels=dict(labels),
            raw_name=raw_of[name],
        )
        for (name, labels), value in sums.items()
    ]
    if PREFIX_QUERIES.name not in raw_of:
        for _engine, parts in DERIVED_QUERIES.items():
            if all(p in engine_values for p in parts):
                out.append(
                    MetricSample(
                        timestamp_s=timestamp_s,
                        name=PREFIX_QUERIES.name,
                        value=sum(engine_values[p] for p in parts),
                        raw_name="+".join(parts),
                    )
                )
                break
    return out


def sample_values(text: str) -> dict[str, float]:
    """Every sample by the name it is exposed under (``_total``, ``_bucket``, ... kept), its
    values summed over label sets (vLLM's ``engine``/``model_name``); llama.cpp's carry none.

    Raises ``ValueError`` when the text is not Prometheus exposition format.
    """
    values: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            values[s.name] = values.get(s.name, 0.0) + float(s.value)
    return values


def detect_engine(text: str) -> str | None:
    """Which engine's names an exposition text uses (vllm, sglang, llamacpp) or None."""
    for prefix in ("vllm:", "sglang:", "llamacpp:"):
        if prefix in text:
            return prefix[:-1]
    return None


@dataclass
class ScrapeLog:
    """Everything one scraper collected."""

    samples: list[MetricSample] = field(default_factory=list)
    failures: list[tuple[float, str]] = field(default_factory=list)
    num_scrapes: int = 0
    engine: str | None = None
    first_text: str | None = None
    last_text: str | None = None
    #: run-timeline time of the settled final scrape (see MetricsScraper.settle), if taken
    settled_s: float | None = None


class MetricsScraper:
    """Poll ``url`` every ``interval_s`` until stopped; samples on the ``t0`` timeline."""

    def __init__(
        self,
        url: str,
        *,
        interval_s: float,
        t0: float,
        writer: JsonlWriter | None = None,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.url = url
        self.interval_s = interval_s
        self.t0 = t0
        self.writer = writer
        self.timeout_s = timeout_s
        self.clock = clock
        self.log = ScrapeLog()

    async def scrape_once(self, session: aiohttp.ClientSession) -> bool:
        now = self.clock() - self.t0
        self.log.num_scrapes += 1
        try:
            async with asyncio.timeout(self.timeout_s):
                async with session.get(self.url) as resp:
                    text = await resp.text()
                    if resp.status != 200:
                        raise ValueError(f"HTTP {resp.status}")
            samples = parse_exposition(text, now)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            self.log.failures.append((now, f"{type(exc).__name__}: {exc}"[:200]))
            return False
        if self.log.first_text is None:
            self.log.first_text = text
            self.log.engine = detect_engine(text)
        self.log.last_text = text
        self.log.samples.extend(samples)
        if self.writer is not None:
            self.writer.write_many(samples)
        return True

    async def run(self, stop: asyncio.Event) -> ScrapeLog:
        """Scrape at the interval until ``stop`` is set, then once more."""
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                started = self.clock()
                await self.scrape_once(session)
                wait = self.interval_s - (self.clock() - started)
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=wait)
            await self.scrape_once(session)
        return self.log

    def _counter_values(self, since: int) -> dict[str, float]:
        return {
            s.name: s.value
            for s in self.log.samples[since:]
            if not s.labels and UNIFIED_KINDS.get(_base_name(s.name)) in ("counter", "histogram")
        }

    def _count_of(self, name: str) -> list[float]:
        return [s.value for s in self.log.samples if s.name == name and not s.labels]

    async def settle(
        self, expected_finished: int, *, timeout_s: float = 10.0, interval_s: float = 0.25
    ) -> bool:
        """Scrape until the engine has counted the run's last request; True when it did.

        Engines update their counters after the response is sent (observed on vLLM 0.32: a
        scrape right after the last response counted 29 of 40 requests). Done when the e2e
        histogram counted ``expected_finished`` more requests than at the first scrape, or,
        for an engine without one, when two scrapes in a row give the same counters; bounded
        by ``timeout_s``. The settled time is ``self.log.settled_s`` (run timeline).
        """
        e2e = E2E.name + "_count"
        first = self._count_of(e2e)
        deadline = self.clock() + timeout_s
        previous: dict[str, float] | None = None
        async with aiohttp.ClientSession() as session:
            while True:
                mark = len(self.log.samples)
                ok = await self.scrape_once(session)
                now = self.clock() - self.t0
                if ok:
                    counts = self._count_of(e2e)
                    values = self._counter_values(mark)
                    if first and counts and counts[-1] - first[0] >= expected_finished:
                        self.log.settled_s = now
                        return True
                    if not first and previous is not None and values == previous:
                        self.log.settled_s = now
                        return True
                    previous = values
                if self.clock() > deadline:
                    self.log.settled_s = now
                    return False
                await asyncio.sleep(interval_s)

    async def baseline(self, duration_s: float) -> None:
        """Idle baseline: scrape for ``duration_s`` before the load starts (at least once)."""
        async with aiohttp.ClientSession() as session:
            end = self.clock() + duration_s
            while True:
                await self.scrape_once(session)
                if self.clock() + self.interval_s > end:
                    break
                await asyncio.sleep(self.interval_s)


def summarize_series(
    samples: list[MetricSample], *, window: tuple[float, float] | None = None
) -> dict[str, dict[str, float | int | None]]:
    """Per unified series: samples, min, max, last, baseline; counters add delta and rate.

    ``window`` = (start_s, end_s) of the load on the run timeline; samples before ``start_s``
    are the idle baseline. Counter resets (a value lower than the previous one) restart the
    delta from the new value, as Prometheus' ``increase()`` does.
    """
    by_name: dict[str, list[MetricSample]] = {}
    for s in samples:
        if s.labels:  # histogram buckets: too many to summarise here
            continue
        by_name.setdefault(s.name, []).append(s)
    out: dict[str, dict[str, float | int | None]] = {}
    start, end = window if window is not None else (float("-inf"), float("inf"))
    for name, series in sorted(by_name.items()):
        series.sort(key=lambda s: s.timestamp_s)
        before = [s for s in series if s.timestamp_s < start]
        during = [s for s in series if start <= s.timestamp_s <= end] or series
        values = [s.value for s in during]
        entry: dict[str, float | int | None] = {
            "samples": len(during),
            "min": min(values),
            "max": max(values),
            "last": values[-1],
            "baseline": before[-1].value if before else None,
        }
        base_kind = UNIFIED_KINDS.get(name.removesuffix("_sum").removesuffix("_count"))
        is_counter = base_kind in ("counter", "histogram")
        if is_counter:
            points = ([before[-1]] if before else []) + during
            delta = 0.0
            for a, b in itertools.pairwise(points):
                delta += b.value - a.value if b.value >= a.value else b.value
            span = points[-1].timestamp_s - points[0].timestamp_s
            entry["delta"] = delta
            entry["rate_per_s"] = delta / span if span > 0 else None
        out[name] = entry
    return out
