"""A failing engine step ends the requests in flight with an error (never a hang) and the
server keeps serving."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kvbudget.load.client import ClientRequest, OpenAIClient
from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine
from kvbudget.sim.timing import BatchShape, StepTimeModel


class _FlakyTiming:
    """The engine's own timing, raising inside its third step (a bug in the step).

    The engine is not patched: compiled with mypyc (kvbudget.sim.native), its methods cannot
    be replaced from Python."""

    def __init__(self, real: StepTimeModel) -> None:
        self.real = real
        self.name = real.name
        self.calls = 0

    def step_time_s(self, shape: BatchShape) -> float:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("simulated scheduler bug")
        return self.real.step_time_s(shape)

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        return self.real.prefill_time_s(num_tokens, context_tokens)

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        return self.real.decode_time_s(num_seqs, context_tokens)


@pytest.mark.timeout(60)
def test_engine_failure_is_reported_to_clients() -> None:
    async def go() -> tuple[Any, Any, Any, str | None]:
        built = build_engine(ServeEngineOptions(model="m", num_gpu_blocks=256, step_s=0.002))
        core = built.core
        core.timing = _FlakyTiming(core.timing)
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
