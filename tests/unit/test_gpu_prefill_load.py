"""bench/gpu_prefill_load.py's floor of the prefill a silicon row's measurements imply, worked by
hand on a fake step-time model (one method: ``prefill_time_s``)."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.repo_scripts import load_script


def _script() -> ModuleType:
    return load_script("bench/gpu_prefill_load.py")


class LinearPrefill:
    """1 ms per prompt token plus 0.001 ms per cached token before the chunk; records calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        self.calls.append((num_tokens, context_tokens))
        return (num_tokens * 1.0 + context_tokens * 0.001) / 1e3


def test_prompt_priced_in_chunks_after_the_ones_before() -> None:
    timing = LinearPrefill()
    got = _script().prefill_s(timing, 20_000, 8192)
    assert timing.calls == [(8192, 0), (8192, 8192), (3616, 16384)]
    # 20,000 ms for the tokens, 0.001 x (8192 + 16384) ms for the context
    assert got == pytest.approx((20_000 + 24.576) / 1e3)


def _row(**over: str) -> dict[str, str]:
    row = {
        "id": "r1",
        "batch_size": "40",
        "isl": "8000",
        "osl": "100",
        "attention_dp_size": "1",
        "moe_ep_size": "1",
        "model_path": "meta-llama/Llama-3.1-8B",
    }
    return {**row, **over}


@pytest.mark.parametrize(
    ("client", "dp", "prompt", "per_engine"),
    [
        # fixed lengths: the whole prompt; 40 clients / (0.2 s + 99 x 8 ms) = 40 / 0.992 s
        ("fixed", "1", 8000, 40 / 0.992),
        # InferenceX draws int(0.8 x 8000) = 6400 at the shortest; two DP engines share them
        ("inferencex", "2", 6400, 40 / 0.992 / 2),
    ],
)
def test_floor_by_hand(
    monkeypatch: pytest.MonkeyPatch, client: str, dp: str, prompt: int, per_engine: float
) -> None:
    script = _script()
    timing = LinearPrefill()
    built = SimpleNamespace(
        timing=timing, config=SimpleNamespace(max_num_batched_tokens=8192), timing_name="fake"
    )

    def fake_build(*_args: Any, **_kwargs: Any) -> Any:
        return built

    monkeypatch.setattr(script, "build_replica", fake_build)
    monkeypatch.setattr(script, "_request", lambda row: row)
    monkeypatch.setattr(script, "client", lambda row: client)
    result = {"measured": {"mean_ttft_ms": 200.0, "mean_tpot_ms": 8.0}}
    got = script.row_load(_row(attention_dp_size=dp), result)
    one_s = prompt / 1e3  # one chunk (under 8,192 tokens), no cached context
    assert got["prompt_tokens"] == prompt
    assert got["prefill_ms"] == pytest.approx(prompt, abs=1e-3)
    assert got["requests_per_s_per_engine"] == pytest.approx(per_engine, abs=1e-3)
    assert got["prefill_busy_floor"] == pytest.approx(per_engine * one_s, abs=1e-4)
