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
    """1 ms per prompt token plus 0.001 ms per cached token before the chunk; records calls.
    Decode attention: 0.0001 ms per sequence per context token."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.attention_calls: list[tuple[int, int]] = []

    def decode_attention_time_s(self, num_seqs: int, context_tokens_per_seq: int) -> float:
        self.attention_calls.append((num_seqs, context_tokens_per_seq))
        return num_seqs * context_tokens_per_seq * 1e-4 / 1e3

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        return (5.0 + context_tokens * 1e-4) / 1e3  # 5 ms of GEMMs plus the attention

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
    ("client", "dp", "prompt", "per_engine", "attention", "busy"),
    [
        # fixed lengths: the whole prompt; 40 clients / (0.2 s + 99 x 8 ms) = 40 / 0.992 s.
        # Decodes: 40 sequences at 8,000 + 100 // 2 = 8,050 tokens: 0.805 ms a token; one
        # output length, so busy = 40 / 0.992 x (8 s + 99 x 0.805 ms)
        ("fixed", "1", 8000, 40 / 0.992, (40, 8050), 40 / 0.992 * (8.0 + 99 * 0.805e-3)),
        # InferenceX draws int(0.8 x 8000) = 6400 at the shortest; two DP engines share them.
        # Decodes: 20 sequences an engine at 6,400 + int(0.8 x 100) // 2 = 6,440: 0.644 ms a
        # token; outputs 80 or 100: 40 / (0.2 + 79 x 0.008) / 2 x (6.4 + 79 x 0.644e-3) =
        # 155.07 and 40 / 0.992 / 2 x (6.4 + 99 x 0.644e-3) = 130.31 -> the lower, at 100
        (
            "inferencex",
            "2",
            6400,
            40 / 0.992 / 2,
            (20, 6440),
            40 / 0.992 / 2 * (6.4 + 99 * 0.644e-3),
        ),
    ],
)
def test_floor_by_hand(
    monkeypatch: pytest.MonkeyPatch,
    client: str,
    dp: str,
    prompt: int,
    per_engine: float,
    attention: tuple[int, int],
    busy: float,
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
    assert timing.attention_calls == [attention]
    assert got["decode_seqs_per_step"] == attention[0]
    assert got["decode_step_ms"] == pytest.approx(5.0 + attention[0] * attention[1] * 1e-4)
    assert got["busy_floor"] == pytest.approx(busy, abs=1e-4)


def test_decode_attention_lifts_a_row_over_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-output row: 48 clients, 8,000 in / 500 out, 430 ms TTFT and 15.6 ms TPOT measured;
    1 s of prefill a prompt would be 0.74 of each second at most, under 1; decode attention of
    12 ms a step of 48 sequences adds 0.25 ms a token x 499 tokens a request."""
    script = _script()

    class Timing(LinearPrefill):
        def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
            return 0.126 * num_tokens / 8000  # 126 ms for the 8,000-token prompt

        def decode_attention_time_s(self, num_seqs: int, context_tokens_per_seq: int) -> float:
            return 0.012

    built = SimpleNamespace(
        timing=Timing(), config=SimpleNamespace(max_num_batched_tokens=8192), timing_name="fake"
    )
    monkeypatch.setattr(script, "build_replica", lambda *_a, **_k: built)
    monkeypatch.setattr(script, "_request", lambda row: row)
    monkeypatch.setattr(script, "client", lambda row: "fixed")
    result = {"measured": {"mean_ttft_ms": 430.0, "mean_tpot_ms": 15.6}}
    got = script.row_load(_row(batch_size="48", osl="500"), result)
    rate = 48 / (0.430 + 499 * 0.0156)  # 5.837 requests a second
    assert got["prefill_busy_floor"] == pytest.approx(rate * 0.126, abs=1e-4)  # 0.7355
    assert got["prefill_busy_floor"] < 1
    assert got["busy_floor"] == pytest.approx(rate * (0.126 + 499 * 0.012 / 48), abs=1e-4)
    assert got["busy_floor"] > 1  # 0.7355 + 5.837 x 0.1248 = 1.464
