"""Send the series to the engine and turn what came back into fit observations.

Where the engine reports its own per-request timings (llama.cpp's final chunk: ``prompt_n``,
``prompt_ms``, ``predicted_n``, ``predicted_ms``, ``cache_n``) those are used: they exclude HTTP
and queueing. Otherwise, with ``--metrics-url``, the engine's histograms scraped before and after
each probe (vLLM/SGLang TTFT and inter-token latency: ``sum`` / ``count`` of the probe's delta;
``source="metrics"``); otherwise the client clock: TTFT for a prefill, the mean inter-token
interval for a decode step (``source="client"``).
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


@dataclass(frozen=True, slots=True)
class ProbeResult:
    probe: Probe
    outcomes: tuple[StreamOutcome, ...]
    #: unified metric name -> increase over the probe (histogram _sum/_count), when scraped
    metric_deltas: dict[str, float] | None = None


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
    """Send every probe in order; a failed request stops the series with a TargetError."""
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
        if probe.kind == "prefix":  # base first, then the extension (it must find the base)
            outs = [
                await client.stream(token_request(f"p{i}-{j}", model, p, probe.max_tokens))
                for j, p in enumerate(probe.prompts)
            ]
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
        after = await scrape(client, metrics_url) if metrics_url else None
        results.append(ProbeResult(probe, tuple(outs), _delta(before, after)))
    return results


def _prefill_from(
    out: StreamOutcome, planned_new: int, n_ubatch: int, engine_ttft_s: float | None
) -> Observation | None:
    t = out.server_timings
    if t and t.get("prompt_n", 0) >= 1 and t.get("prompt_ms", 0) > 0:
        return prefill_observation(
            int(t["prompt_n"]), int(t.get("cache_n", 0)), t["prompt_ms"] / 1e3, n_ubatch=n_ubatch
        )
    if out.sent_s is None or out.first_token_s is None:
        return None
    cached = out.cached_tokens or 0
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
    return steps, times[-1] - times[0], ctx, "client"


def observations(results: list[ProbeResult], *, n_ubatch: int) -> list[Observation]:
    """Prefill points from lone requests; one decode point per batch."""
    obs: list[Observation] = []
    for res in results:
        probe = res.probe
        if probe.kind in ("prefill", "prefix"):
            # the histogram delta of a prefix probe mixes its two requests: client clock there
            ttft = _hist_mean(res.metric_deltas, "engine_ttft_seconds")
            ttft = ttft if probe.kind == "prefill" else None
            for out, prompt in zip(res.outcomes, probe.prompts, strict=True):
                o = _prefill_from(out, len(prompt), n_ubatch, ttft)
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
    """Median of (client TTFT - engine prompt time) over lone requests: HTTP, tokenization."""
    gaps: list[float] = []
    for res in results:
        if res.probe.kind == "decode":
            continue
        for out in res.outcomes:
            t = out.server_timings
            if t and out.sent_s is not None and out.first_token_s is not None:
                gaps.append(out.first_token_s - out.sent_s - t.get("prompt_ms", 0.0) / 1e3)
    return max(0.0, statistics.median(gaps)) if gaps else 0.0
