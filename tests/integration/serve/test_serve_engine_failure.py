"""A failing engine step ends the requests in flight with an error (never a hang) and the
server keeps serving."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kvbudget.load.client import ClientRequest, OpenAIClient
from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine


@pytest.mark.timeout(60)
def test_engine_failure_is_reported_to_clients() -> None:
    async def go() -> tuple[Any, Any, Any, str | None]:
        built = build_engine(ServeEngineOptions(model="m", num_gpu_blocks=256, step_s=0.002))
        core = built.core
        real_step = core.step
        calls = {"n": 0}

        def flaky_step(now_s: float) -> Any:
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("simulated scheduler bug")
            return real_step(now_s)

        core.step = flaky_step  # type: ignore[method-assign]
        async with ServeApp(built.replica, model_name="m", max_model_len=8192) as app:
            async with OpenAIClient(app.base_url, concurrency=2, timeout_s=20) as c:
                streamed, plain = await asyncio.gather(
                    c.stream(ClientRequest("a", "ba be bi", 50, "m")),
                    c.session.post(
                        app.base_url + "/v1/completions",
                        json={"model": "m", "prompt": "bo bu", "max_tokens": 50},
                    ),
                )
                status = plain.status
                plain.release()
                after = await c.stream(ClientRequest("b", "ba be bi", 3, "m"))
            return streamed, status, after, app.engine.error

    streamed, status, after, error = asyncio.run(go())
    assert streamed.status == "error"
    assert streamed.error_kind == "other"
    assert "simulated scheduler bug" in (streamed.error_excerpt or "")
    assert status == 500
    assert after.status == "ok"  # the server survived
    assert error is not None and "simulated scheduler bug" in error
