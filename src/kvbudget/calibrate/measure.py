"""Send the series to the engine and turn what came back into fit observations.

Where the engine reports its own per-request timings (llama.cpp's final chunk: ``prompt_n``,
``prompt_ms``, ``predicted_n``, ``predicted_ms``, ``cache_n``) those are used: they exclude HTTP
and queueing. Otherwise, with ``--metrics-url``, the engine's histograms scraped before and after
each probe (``sum`` / ``count`` of the probe's delta; ``source="metrics"``): the prompt time is
vLLM's ``vllm:request_prefill_time_seconds`` (engine core: first SCHEDULED to first token, so
no HTTP, queue or detokenization; vLLM 0.32.0 ``vllm/v1/metrics/stats.py``
``update_from_finished_request``), else the engine's TTFT (SGLang); a decode step is the
inter-token latency. The "after" scrape waits until the engine has counted the probe's
requests (vLLM records them a moment after the last response). A prefix probe is scraped
around each of its two requests, and the extension's cached tokens are the engine's prefix-cache
hit delta (vLLM reports ``cached_tokens`` in ``usage`` only with
``--enable-prompt-tokens-details``). Otherwise the client clock: TTFT for a prefill, the mean
inter-token interval for a decode step (``source="client"``).
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass

import aiohttp

from kvbudget.calibrate.fit import Observation, decode_observation, prefill_observation
from kvbudget.calibrate.series import Probe
from kvbudget.errors import RunFailedError, TargetError
from kvbudget.load.client import ClientRequest, OpenAIClient, StreamOutcome
from kvbudget.load.diagnosis import Failure, stopped_line
from kvbudget.load.prometheus import parse_exposition
from kvbudget.records import at_one_instant


@dataclass(frozen=True, slots=True)
class ProbeResult:
    probe: Probe
    outcomes: tuple[StreamOutcome, ...]
    #: unified metric name -> increase over the probe (histogram _sum/_count), when scraped
    metric_deltas: dict[str, float] | None = None
    #: the same per request, for a prefix probe (its requests are sent one after the other)
    request_deltas: tuple[dict[str, float] | None, ...] = ()


#: how long the "after" scrape waits for the engine to count a probe's requests
SETTLE_TIMEOUT_S = 10.0
SETTLE_POLL_S = 0.05
#: histogram counts that grow by one per finished request (the first one the engine exports)
REQUEST_COUNTS = ("engine_prefill_seconds_count", "engine_e2e_seconds_count")


async def scrape(client: OpenAIClient, url: str) -> dict[str, float] | None:
    """Unlabelled totals of one /metrics scrape (None when it fails: never fatal)."""
    try:
        async with asyncio.timeout(client.connect_timeout_s):
            async with client.session.get(url) as resp:
                if resp.status != 200:
                    return None
                text = await resp.text()
        samples = parse_exposition(text, 0.0)
    except (TimeoutError, OSError, ValueError, aiohttp.ClientError):
        return None
    out: dict[str, float] = {}
    for sample in samples:
        if "le" not in sample.labels:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def _delta(
    before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, float] | None:
    if before is None or after is None:
        return None
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


async def settled_scrape(
    client: OpenAIClient, url: str, before: dict[str, float] | None, num_requests: int
) -> dict[str, float] | None:
    """A scrape taken once the engine has counted ``num_requests`` more finished requests
    (or after ``SETTLE_TIMEOUT_S``: the last scrape then, whatever it holds)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + SETTLE_TIMEOUT_S
    while True:
        after = await scrape(client, url)
        if before is None or after is None:
            return after
        key = next((k for k in REQUEST_COUNTS if k in after), None)
        if key is None or after[key] - before.get(key, 0.0) >= num_requests:
            return after
        if loop.time() > end:
            return after
        await asyncio.sleep(SETTLE_POLL_S)


def _hist_mean(deltas: dict[str, float] | None, name: str) -> float | None:
    if not deltas or deltas.get(f"{name}_count", 0.0) <= 0:
        return None
    return deltas.get(f"{name}_sum", 0.0) / deltas[f"{name}_count"]


def token_request(rid: str, model: str, prompt: tuple[int, ...], max_tokens: int) -> ClientRequest:
    """A completion whose prompt is a list of token ids (llama.cpp, vLLM and SGLang take it)."""
    return ClientRequest(
        request_id=rid,
        prompt="",
        max_tokens=max_tokens,
        model=model,
        extra_body={"prompt": list(prompt), "cache_prompt": True, "temperature": 0},
    )


async def run_series(
    client: OpenAIClient,
    model: str,
    probes: list[Probe],
    *,
    deadline_s: float,
    metrics_url: str | None = None,
) -> list[ProbeResult]:
    """Send every probe in order; a failed request stops the series with a RunFailedError (exit 4)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    results: list[ProbeResult] = []
    sent = 0
    for i, probe in enumerate(probes):
        if loop.time() > end:
            raise TargetError(
                f"calibration series: {i} of {len(probes)} probes done after {deadline_s:g} s; "
                "raise --deadline-s or lower --repeats"
            )
        before = await scrape(client, metrics_url) if metrics_url else None
        per_request: list[dict[str, float] | None] = []
        if probe.kind == "prefix":  # base first, then the extension (it must find the base)
            outs = []
            mark = before
            for j, p in enumerate(probe.prompts):
                outs.append(
                    await client.stream(token_request(f"p{i}-{j}", model, p, probe.max_tokens))
                )
                if metrics_url:
                    now = await settled_scrape(client, metrics_url, mark, 1)
                    per_request.append(_delta(mark, now))
                    mark = now
        else:
            reqs = [
                token_request(f"p{i}-{j}", model, p, probe.max_tokens)
                for j, p in enumerate(probe.prompts)
            ]
            outs = list(await asyncio.gather(*(client.stream(r) for r in reqs)))
        bad = [o for o in outs if o.status != "ok"]
        if bad:
            sent += len(outs)
            line = stopped_line(
                [Failure(o.error_kind, o.http_status, o.error_excerpt) for o in bad],
                num_sent=sent,
                url=client.base_url,
                what="calibration requests",
            )
            raise RunFailedError(f"calibration probe '{probe.label}': {line}")
        sent += len(outs)
        after = None
        if metrics_url:
            after = await settled_scrape(client, metrics_url, before, len(outs))
        results.append(ProbeResult(probe, tuple(outs), _delta(before, after), tuple(per_request)))
    return results


def engine_prompt_s(deltas: dict[str, float] | None) -> float | None:
    """The engine's prompt time of a probe's requests (mean): vLLM's prefill-time histogram,
    else its TTFT histogram."""
    prefill = _hist_mean(deltas, "engine_prefill_seconds")
    return prefill if prefill is not None else _hist_mean(deltas, "engine_ttft_seconds")


def _prefill_from(
    out: StreamOutcome,
    planned_new: int,
    n_ubatch: int,
    engine_ttft_s: float | None,
    engine_cached: int | None = None,
) -> Observation | None:
    t = out.server_timings
    if t and t.get("prompt_n", 0) >= 1 and t.get("prompt_ms", 0) > 0:
        return prefill_observation(
            int(t["prompt_n"]), int(t.get("cache_n", 0)), t["prompt_ms"] / 1e3, n_ubatch=n_ubatch
        )
    if out.sent_s is None or out.first_token_s is None:
        return None
    cached = out.cached_tokens or engine_cached or 0
    prompt = out.usage_prompt_tokens or planned_new
    seconds, source = out.first_token_s - out.sent_s, "client"
    if engine_ttft_s is not None:
        seconds, source = engine_ttft_s, "metrics"
    return prefill_observation(
        max(1, prompt - cached), cached, seconds, n_ubatch=n_ubatch, source=source
    )


def _decode_time(
    out: StreamOutcome, engine_itl_s: float | None
) -> tuple[int, float, int, str] | None:
    """(steps, seconds, start context, source) of one request's decode phase."""
    t = out.server_timings
    if t and t.get("predicted_n", 0) >= 2 and t.get("predicted_ms", 0) > 0:
        ctx = int(t.get("prompt_n", 0) + t.get("cache_n", 0))
        return int(t["predicted_n"]) - 1, t["predicted_ms"] / 1e3, ctx, "engine"
    times = out.token_times_s()
    if len(times) < 2:
        return None
    steps, ctx = len(times) - 1, out.usage_prompt_tokens or 0
    if engine_itl_s is not None:
        return steps, engine_itl_s * steps, ctx, "metrics"
    if at_one_instant(times):
        return None  # no decode time to see on the client clock
    return steps, times[-1] - times[0], ctx, "client"


def observations(results: list[ProbeResult], *, n_ubatch: int) -> list[Observation]:
    """Prefill points from lone requests; one decode point per batch."""
    obs: list[Observation] = []
    for res in results:
        probe = res.probe
        if probe.kind in ("prefill", "prefix"):
            # a prefix probe's requests are scraped one by one (request_deltas)
            per = res.request_deltas or (res.metric_deltas,) * len(res.outcomes)
            for out, prompt, deltas in zip(res.outcomes, probe.prompts, per, strict=True):
                hits = (deltas or {}).get("prefix_cache_hits_tokens")
                cached = int(hits) if hits is not None and probe.kind == "prefix" else None
                o = _prefill_from(out, len(prompt), n_ubatch, engine_prompt_s(deltas), cached)
                if o is not None:
                    obs.append(o)
                # (its one decode step is not used as a decode point: tried with 3-step
                # intervals, they were too noisy on a shared CPU and inflated the context term)
            continue
        # the request whose first token came last: its decode steps all ran at the full batch
        # (the others' first steps may have shared an iteration with its prompt)
        last = max(res.outcomes, key=lambda o: o.first_token_s or 0.0)
        # the ITL histogram covers every request of the probe: clean only when all prompts
        # were computed in one step (else the early requests' steps carried others' prompts)
        one_step = sum(len(p) for p in probe.prompts) <= n_ubatch
        itl = _hist_mean(res.metric_deltas, "engine_itl_seconds") if one_step else None
        part = _decode_time(last, itl)
        if part is not None:
            steps, seconds, ctx, source = part
            obs.append(decode_observation(len(res.outcomes), ctx, steps, seconds, source=source))
    return obs


def request_overhead_s(results: list[ProbeResult]) -> float:
    """Median of (client TTFT - engine prompt time) over lone requests: HTTP, tokenization,
    queueing (engine prompt time: llama.cpp's timings, else the metrics' prompt time)."""
    gaps: list[float] = []
    for res in results:
        if res.probe.kind == "decode":
            continue
        per = res.request_deltas or (res.metric_deltas,) * len(res.outcomes)
        for out, deltas in zip(res.outcomes, per, strict=True):
            if out.sent_s is None or out.first_token_s is None:
                continue
            t = out.server_timings
            if t:
                gaps.append(out.first_token_s - out.sent_s - t.get("prompt_ms", 0.0) / 1e3)
            elif (engine_s := engine_prompt_s(deltas)) is not None:
                gaps.append(out.first_token_s - out.sent_s - engine_s)
    return max(0.0, statistics.median(gaps)) if gaps else 0.0
