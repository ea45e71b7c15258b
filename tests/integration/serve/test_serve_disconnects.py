"""Many clients disconnect mid-request at once: ``serve`` aborts them and frees every block."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine

NUM_STREAMS = 64


@pytest.mark.timeout(60)
def test_concurrent_disconnects_free_every_block() -> None:
    async def go() -> tuple[int, int, int, int, int]:
        # slow steps (20 ms) and long outputs: every stream is still running when it is dropped
        built = build_engine(
            ServeEngineOptions(model="m", num_gpu_blocks=4096, step_s=0.02, max_model_len=4096)
        )
        core = built.core
        async with ServeApp(built.replica, model_name="m", max_model_len=4096) as app:
            body = {
                "model": "m",
                "prompt": " ".join(["ba"] * 100) + " be",
                "max_tokens": 1000,
                "stream": True,
            }
            connector = aiohttp.TCPConnector(limit=NUM_STREAMS)
            got_first = 0
            held: list[int] = []
            async with aiohttp.ClientSession(connector=connector) as session:

                async def one(i: int) -> None:
                    nonlocal got_first
                    b = dict(body, prompt=f"{body['prompt']} bi{i % 7}")
                    resp = await session.post(app.base_url + "/v1/completions", json=b)
                    await resp.content.readuntil(b"\n\n")  # first token arrived
                    got_first += 1
                    st = core.stats()
                    held.append(st.num_total_blocks - st.num_free_blocks)
                    resp.close()  # drop the connection mid-stream

                # also a few that disconnect before their first token (still queued)
                async def early() -> None:
                    task = asyncio.ensure_future(
                        session.post(app.base_url + "/v1/completions", json=body)
                    )
                    await asyncio.sleep(0.005)
                    task.cancel()
                    try:
                        resp = await task
                        resp.close()
                    except asyncio.CancelledError:
                        pass

                # and non-streaming requests whose client gives up mid-generation
                async def non_stream() -> None:
                    b = dict(body, stream=False)
                    with contextlib.suppress(TimeoutError):
                        async with session.post(
                            app.base_url + "/v1/completions",
                            json=b,
                            timeout=aiohttp.ClientTimeout(total=0.1),
                        ) as resp:
                            await resp.read()

                await asyncio.gather(
                    *(non_stream() for _ in range(8)),
                    *(one(i) for i in range(NUM_STREAMS)),
                    *(early() for _ in range(8)),
                )
            held_during = max(held)
            # let the server notice every disconnect (bounded wait)
            for _ in range(200):
                s = core.stats()
                if s.num_running == 0 and s.num_waiting == 0 and app.engine.num_open == 0:
                    break
                await asyncio.sleep(0.05)
            s = core.stats()
            return got_first, held_during, s.num_free_blocks, s.num_total_blocks, s.num_running

    got_first, held_during, free, total, running = asyncio.run(go())
    assert got_first == NUM_STREAMS
    assert held_during > 1  # blocks really were allocated while streaming
    assert running == 0
    assert free == total - 1  # all but the null block
