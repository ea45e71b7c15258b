"""`kvbudget bench`'s workloads against a real vLLM 0.32.0 (CPU build, tiny dummy-weight llama).

The oracle is the engine itself: its ``POST /tokenize`` (vLLM's tokenizer, special tokens added
as ``vllm bench serve``'s ``len(tokenizer(text).input_ids)`` adds them) and the ``usage`` it
returns for each request.

* a ShareGPT file, read as ``vllm bench serve`` reads it: each conversation's first turn sent as
  written, in file order (``--disable-shuffle``), ``max_tokens`` = the second turn's length in
  the served tokenizer; kvbudget's own count of the prompts (``prompts.prompt_tokens_total``)
  equals the engine's;
* multi-turn sessions: turn 2 is sent after turn 1 finished, its prompt (kept with
  ``--keep-prompts``) is turn 1's prompt, then turn 1's answer as the engine returned it, then a
  new message, and the engine's count of it is its own ``/tokenize`` count of that text (the
  answer of a random-weight model is re-tokenized, so its token count is not the 8 generated).
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.engines import run_kvbudget_bench

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

CONVERSATIONS = [
    ("Summarise the plot of a heist film in two sentences, please.", "A crew plans a theft."),
    ("List four prime numbers greater than ten and explain why.", "11, 13, 17 and 19 are."),
    ("Write a haiku about cache eviction under memory pressure.", "Old blocks fall away."),
]


def _tokens(server: Any, text: str) -> int:
    body = json.dumps({"model": server.served_model_name, "prompt": text}).encode()
    req = urllib.request.Request(
        server.base_url + "/tokenize", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return len(json.loads(resp.read())["tokens"])


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_sharegpt_counts_match_the_engine(vllm_server: Any, tmp_path: Path) -> None:
    server = vllm_server
    data = [
        {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": c}]}
        for p, c in CONVERSATIONS
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    doc = run_kvbudget_bench(
        server,
        server.served_model_name,
        tmp_path / "run",
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(path),
        "--disable-shuffle",
        "--concurrency",
        "1",
    )
    expected_prompt = [_tokens(server, p) for p, _ in CONVERSATIONS]
    expected_output = [_tokens(server, c) for _, c in CONVERSATIONS]
    recs = sorted(_records(tmp_path / "run"), key=lambda r: r["sent_s"])
    assert [r["status"] for r in recs] == ["ok"] * 3
    # sent in file order, as written (the record keeps the prompt's sha256, never its text)
    assert [r["prompt_sha256"] for r in recs] == [
        hashlib.sha256(p.encode()).hexdigest() for p, _ in CONVERSATIONS
    ]
    assert [r["prompt_tokens"] for r in recs] == expected_prompt  # the engine's usage
    assert [r["output_tokens"] for r in recs] == expected_output  # max_tokens, ignore_eos
    assert doc["prompts"]["prompt_tokens_total"] == sum(expected_prompt)
    assert doc["prompts"]["tokenizer"] != "synthetic"


def test_multi_turn_sessions_on_the_engine(vllm_server: Any, tmp_path: Path) -> None:
    server = vllm_server
    doc = run_kvbudget_bench(
        server,
        server.served_model_name,
        tmp_path / "run",
        "--num-turns",
        "2",
        "--num-requests",
        "4",
        "--concurrency",
        "2",
        "--input-tokens",
        "32",
        "--output-tokens",
        "8",
        "--keep-prompts",
    )
    assert doc["requests_ok"] == 4, doc["failures"]
    recs = _records(tmp_path / "run")
    sessions: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        sessions.setdefault(r["session_id"], []).append(r)
    assert len(sessions) == 2
    for turns in sessions.values():
        first, second = sorted(turns, key=lambda r: r["sent_s"])
        assert second["sent_s"] >= first["done_s"]
        assert first["output_tokens"] == 8
        history = first["prompt_text"] + first["output_text"]
        # the history as sent and answered (joined with at most one space), then the new message
        assert second["prompt_text"].replace(" ", "").startswith(history.replace(" ", ""))
        assert len(second["prompt_text"]) > len(history) + 32
        assert second["prompt_tokens"] == _tokens(server, second["prompt_text"])
        assert second["prompt_tokens"] > first["prompt_tokens"] + 32
