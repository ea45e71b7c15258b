"""``kvbudget serve`` steps its replica through the simulator's one driver.

The same requests, one after another, through ``kvbudget serve`` (HTTP, at a high speedup) and
through ``Driver.run`` (the cluster's event loop, closed loop of 1) on the replica
``serve.build`` builds: the same engine steps (duration and free blocks after each), the same
finished requests (prompt, output and cached tokens), the same engine counters. A small pool
(39 usable blocks of 16 tokens) makes the prompts evict each other's prefixes.

Independent anchors, by hand: every request gets ``max_tokens`` outputs (the synthetic engine
never stops early); the second request repeats the first one's 64-token prompt and vLLM never
caches a prompt's last token, so it hits 3 full blocks = 48 tokens.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine
from kvbudget.sim.driver import DriveOptions, Driver
from kvbudget.sim.replica import Replica
from kvbudget.sim.request import EngineRequest, SimRequest
from kvbudget.sim.router import Router
from kvbudget.workload.tokenizer import get_tokenizer

OPTS = ServeEngineOptions(
    model="m", num_gpu_blocks=40, block_size=16, step_s=0.01, per_token_s=1e-4, max_model_len=512
)
SHARED = list(range(10, 74))  # 64 tokens


def _prompts() -> list[tuple[list[int], int]]:
    """(prompt token ids, max_tokens): shared prefixes, repeats and fresh prompts."""
    out: list[tuple[list[int], int]] = [(SHARED, 5), (SHARED, 5)]
    for i in range(10):
        tail = list(range(1000 + 100 * i, 1000 + 100 * i + 20 + 17 * (i % 4)))
        if i % 3 == 0:
            out.append((tail * 3, 9 + i))  # fresh, long: pushes the shared blocks out
        else:
            out.append((SHARED + tail, 3 + i))
    return out


Step = tuple[float, int]
Done = tuple[int, int, int, str | None]


def _spy(driver: Driver) -> tuple[list[Step], list[Done]]:
    steps: list[Step] = []
    done: list[Done] = []

    def on_step(rep: Replica, index: int, now_s: float, duration_s: float) -> None:
        steps.append((round(duration_s, 12), rep.core.pool.num_free_blocks))

    def on_finish(req: SimRequest, rep: Replica) -> None:
        done.append(
            (req.num_prompt_tokens, req.num_output_tokens, req.num_cached_tokens, req.finish_reason)
        )

    driver.on_step = on_step
    driver.on_finish = on_finish
    return steps, done


def _through_serve() -> tuple[list[Step], list[Done], list[tuple[int, int]], Any, int]:
    tok = get_tokenizer()

    async def go() -> tuple[list[Step], list[Done], list[tuple[int, int]], Any, int]:
        built = build_engine(OPTS)
        app = ServeApp(built.replica, model_name="m", max_model_len=512, speedup=1000.0)
        steps, done = _spy(app.engine.driver)
        usages: list[tuple[int, int]] = []
        async with app, aiohttp.ClientSession() as session:
            for i, (ids, max_tokens) in enumerate(_prompts()):
                body = {"model": "m", "prompt": tok.decode(ids), "max_tokens": max_tokens}
                if i % 2:  # every other one streamed: count the tokens that arrive
                    body |= {"stream": True, "stream_options": {"include_usage": True}}
                async with session.post(app.base_url + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    text = await r.text()
                if i % 2:
                    events = [b[6:] for b in text.split("\n\n") if b.startswith("data: ")]
                    chunks = [json.loads(e) for e in events if e != "[DONE]"]
                    streamed = sum(1 for c in chunks if c["choices"])
                    use = chunks[-1]["usage"]
                    assert streamed == use["completion_tokens"]
                else:
                    use = json.loads(text)["usage"]
                usages.append(
                    (use["completion_tokens"], use["prompt_tokens_details"]["cached_tokens"])
                )
            assert app.engine.driver.num_steps == app.engine.num_steps  # every step it ran
            return steps, done, usages, built.core.stats(), app.engine.num_steps

    return asyncio.run(go())


def _through_driver_run() -> tuple[list[Step], list[Done], Any, int]:
    built = build_engine(OPTS)
    driver = Driver([built.replica], Router("round_robin"), on_finish=print, on_reject=print)
    steps, done = _spy(driver)
    requests = [
        EngineRequest(f"r{i}", tuple(ids), max_tokens, arrival_s=0.0)
        for i, (ids, max_tokens) in enumerate(_prompts())
    ]
    outcome = driver.run(requests, DriveOptions(concurrency=1))
    assert outcome.num_arrived == len(requests)
    return steps, done, built.core.stats(), driver.num_steps


@pytest.mark.timeout(120)
def test_serve_and_driver_run_step_the_replica_the_same_way() -> None:
    served_steps, served_done, usages, served_stats, num_steps = _through_serve()
    run_steps, run_done, run_stats, run_num_steps = _through_driver_run()
    prompts = _prompts()
    # by hand: every request its max_tokens; the repeated 64-token prompt hits 48 tokens
    assert [u[0] for u in usages] == [m for _, m in prompts]
    assert usages[0][1] == 0 and usages[1][1] == 48
    # serve ran its steps through the driver (its on_step saw each that computed tokens;
    # serve also steps once idle after each request). The closed loop does the same number:
    # the replica is planned at vLLM 0.32.0, which schedules asynchronously (on from 0.14.0), so
    # each replacement reaches it after the step following its predecessor's last was already
    # scheduled and waits that empty step (len(prompts) - 1 of them), and one idle step follows
    # the last request
    assert num_steps == len(served_steps) + len(prompts)
    assert run_num_steps == len(run_steps) + (len(prompts) - 1) + 1
    # the same steps, finishes and counters as the cluster's event loop
    assert served_steps == run_steps
    assert served_done == run_done
    assert [(d[1], d[2]) for d in served_done] == usages
    assert served_stats == run_stats
    assert run_stats.num_evicted_blocks > 0  # the prompts did evict each other's prefixes
    assert run_stats.num_free_blocks == run_stats.num_total_blocks - 1  # all back but null
