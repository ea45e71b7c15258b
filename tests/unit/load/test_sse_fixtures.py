"""Token chunks in real engines' streams: one per output token, as each engine counts them.

The fixtures are streams recorded from vLLM 0.32.0 (CPU build) and llama.cpp (the suite's cached
build) on the tiny test models (``fixtures/sse/capture.py``). The independent count is the
engine's own: ``usage.completion_tokens`` where the stream reports it, else the request's
``max_tokens`` for a stream that finished with ``"length"``. Both engines send one chunk per
token here, so the parser must find exactly that many token chunks: vLLM's chunks whose text is
empty (a stop token it leaves out of the text) count, llama.cpp's empty closing chunk does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.load.outcome import Endpoint, StreamOutcome, carries_token, parse_events

FIXTURES = Path(__file__).parent / "fixtures" / "sse"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.sse"))


def load(name: str) -> tuple[dict[str, object], list[bytes]]:
    head, *lines = (FIXTURES / f"{name}.sse").read_text().splitlines()
    request = json.loads(head.split("; request: ", 1)[1])
    return request, [x.encode() for x in lines if x]


def engine_token_count(request: dict[str, object], events: list[bytes]) -> int:
    for data in reversed(events):
        usage = json.loads(data).get("usage")
        if usage:
            return int(usage["completion_tokens"])
    last = json.loads(events[-1])["choices"][0]
    assert last["finish_reason"] == "length", "no usage: only a length-capped stream is counted"
    return int(str(request["max_tokens"]))


def test_every_engine_and_case_is_recorded() -> None:
    assert NAMES == [
        "llamacpp-chat-length",
        "llamacpp-completions-length",
        "vllm-completions-length",
        "vllm-completions-stop-token",
    ]


@pytest.mark.parametrize("name", NAMES)
def test_one_token_chunk_per_output_token(name: str) -> None:
    request, events = load(name)
    endpoint: Endpoint = "chat" if "messages" in request else "completions"
    out = StreamOutcome(request_id=name)
    timed = [(0.1 * k, data) for k, data in enumerate(events)]
    assert parse_events(timed, endpoint, out) is None
    expected = engine_token_count(request, events)
    assert out.num_chunks == expected
    assert sum(carries_token(data, endpoint) for data in events) == expected
    assert out.token_times_s() == out.chunk_times_s  # one chunk per token: exact times
    assert out.finish_reason in ("length", "stop")


def test_vllm_stop_token_chunk_has_empty_text_and_counts() -> None:
    _, events = load("vllm-completions-stop-token")
    last = json.loads(events[-2])["choices"][0]
    assert (last["text"], last["finish_reason"]) == ("", "stop") and last["stop_reason"]
    out = StreamOutcome(request_id="x")
    assert parse_events([(0.1 * k, d) for k, d in enumerate(events)], "completions", out) is None
    assert out.chunk_times_s[-1] == pytest.approx(0.1 * (len(events) - 2))
