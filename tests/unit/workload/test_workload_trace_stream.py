"""A trace replay streams the file (in order) and gives the requests the whole-file replay did.

Reference: the replay written out as the docs state it (workloads.md, "Traces"), on the whole
file: sort by arrival (stable), shift to start at 0, divide by ``speedup``; each hash id's block
regenerated from ``(base_seed, hash_id)`` at the line's block size and kept for the whole
replay; missing tokens drawn from ``(base_seed, 2**40, line index)``; ``r{k:06d}`` for a line
without an id.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.errors import ConfigError
from kvbudget.workload import traces
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.tokenizer import SyntheticTokenizer
from kvbudget.workload.traces import read_trace, stream_trace_requests

TOK = SyntheticTokenizer(32000)
SEED = 7


def reference(
    path: Path, *, block_size: int, speedup: float = 1.0, duration_s: float | None = None
) -> list[PlannedRequest]:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def arrival(x: dict[str, float]) -> float:
        if x.get("arrival_s") is not None:
            return x["arrival_s"]
        return x["timestamp"] / 1000.0 if x.get("timestamp") is not None else 0.0

    order = sorted(range(len(lines)), key=lambda i: arrival(lines[i]))
    t0 = arrival(lines[order[0]])
    blocks: dict[tuple[int, int], np.ndarray] = {}
    out = []
    for k, i in enumerate(order):
        x = lines[i]
        if duration_s is not None and (arrival(x) - t0) / speedup >= duration_s:
            break
        bs = int(x.get("block_size") or block_size)
        pieces = []
        for h in x.get("hash_ids", []):
            if (h, bs) not in blocks:
                blocks[(h, bs)] = TOK.random_ids(np.random.default_rng([SEED, h]), bs)
            pieces.append(blocks[(h, bs)])
        have = sum(p.size for p in pieces)
        if have < x["input_length"]:
            rng = np.random.default_rng([SEED, 1 << 40, i])
            pieces.append(TOK.random_ids(rng, x["input_length"] - have))
        ids = tuple(np.concatenate(pieces)[: x["input_length"]].tolist())
        out.append(
            PlannedRequest(
                request_id=x.get("request_id") or f"r{k:06d}",
                arrival_s=(arrival(x) - t0) / speedup,
                prompt_token_ids=ids,
                output_tokens=x["output_length"],
            )
        )
    return out


def write(path: Path, lines: list[dict[str, object]]) -> Path:
    # a blank line after every seventh record: skipped, and not counted as a line index
    text = "".join(json.dumps(x) + "\n" + ("\n" if k % 7 == 6 else "") for k, x in enumerate(lines))
    path.write_text(text)
    return path


def mooncake(n: int, rng: np.random.Generator, *, in_order: bool) -> list[dict[str, object]]:
    times = np.cumsum(rng.integers(0, 3, size=n)) * 250  # ms, with ties
    if not in_order:
        rng.shuffle(times)
    out: list[dict[str, object]] = []
    for k in range(n):
        num_blocks = int(rng.integers(0, 4))
        hash_ids = [int(h) for h in rng.integers(0, 12, size=num_blocks)]
        line: dict[str, object] = {
            "timestamp": int(times[k]),
            "input_length": int(rng.integers(1, 4 * 8 + 5)),
            "output_length": int(rng.integers(1, 9)),
            "hash_ids": hash_ids,
        }
        if k % 5 == 0:
            line["request_id"] = f"given-{k}"
        if k % 9 == 4:
            line["block_size"] = 4  # a line with its own block size shares no block
        out.append(line)
    return out


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_stream_matches_the_whole_file_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, in_order: bool
) -> None:
    monkeypatch.setattr(traces, "BLOCK_CACHE_SIZE", 3)  # 12 hash ids: blocks drawn again
    path = write(tmp_path / "t.jsonl", mooncake(60, np.random.default_rng(seed), in_order=in_order))
    got = list(stream_trace_requests(path, TOK, base_seed=SEED, default_block_size=8, speedup=2.0))
    assert got == reference(path, block_size=8, speedup=2.0)
    limited = stream_trace_requests(path, TOK, base_seed=SEED, default_block_size=8, num_requests=7)
    assert list(limited) == reference(path, block_size=8)[:7]
    # 1 s of a trace spread over about 7.5 s (ties at the cut-off excluded: arrival < duration)
    cut = stream_trace_requests(path, TOK, base_seed=SEED, default_block_size=8, duration_s=1.0)
    assert list(cut) == reference(path, block_size=8, duration_s=1.0)
    compact = list(
        stream_trace_requests(
            path, TOK, base_seed=SEED, default_block_size=8, speedup=2.0, compact_ids=True
        )
    )
    assert all(isinstance(r.prompt_token_ids, array) for r in compact)
    as_tuples = [replace(r, prompt_token_ids=tuple(r.prompt_token_ids)) for r in compact]
    assert as_tuples == got


def test_an_ordered_trace_is_replayed_while_it_is_read(tmp_path: Path) -> None:
    """The requests before a bad line come out before the error: the file is not parsed whole
    first (its arrival fields are, in a pre-pass that checks the order)."""
    good = {"arrival_s": 1.0, "input_length": 4, "output_length": 2}
    path = write(tmp_path / "t.jsonl", [good, good, {"arrival_s": 2.0, "input_length": 0}])
    stream = stream_trace_requests(path, TOK, base_seed=SEED)
    first, second = next(stream), next(stream)
    assert (first.request_id, second.request_id) == ("r000000", "r000001")
    with pytest.raises(ConfigError, match=r"t.jsonl:3: field input_length=0"):
        next(stream)
    with pytest.raises(ConfigError, match=r"t.jsonl:3: field input_length=0"):
        read_trace(path)  # the whole-file reader refuses it before any request


def test_bad_arrival_is_refused_by_the_pre_pass(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [{"arrival_s": -1, "input_length": 4, "output_length": 2}])
    with pytest.raises(ConfigError, match=r"t.jsonl:1: field arrival_s=-1"):
        next(stream_trace_requests(path, TOK, base_seed=SEED))
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    assert list(stream_trace_requests(empty, TOK, base_seed=SEED)) == []


def test_the_first_bad_line_is_named_whichever_field_it_is(tmp_path: Path) -> None:
    """The order pre-pass reads only arrival fields; an error is still the file's first bad
    line, as :func:`read_trace` names it."""
    lines: list[dict[str, object]] = [
        {"arrival_s": 0.0, "input_length": 4, "output_length": 1},
        {"arrival_s": 1.0, "input_length": 0, "output_length": 1},
        {"arrival_s": -3.0, "input_length": 4, "output_length": 1},
    ]
    path = write(tmp_path / "t.jsonl", lines)
    with pytest.raises(ConfigError, match=r"t.jsonl:2: field input_length=0"):
        list(stream_trace_requests(path, TOK, base_seed=SEED))


def test_a_trace_changed_between_the_passes_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = [{"arrival_s": float(t), "input_length": 4, "output_length": 1} for t in (1, 2, 3)]
    path = write(tmp_path / "t.jsonl", good)
    real = traces._lines

    def rewrite_after_pre_pass(p: str | Path, model: type[Any]) -> Any:
        if model is traces.TraceRecord:  # the second pass: the file has changed meanwhile
            write(Path(p), [good[2], good[0], good[1]])
        return real(p, model)

    monkeypatch.setattr(traces, "_lines", rewrite_after_pre_pass)
    with pytest.raises(ConfigError, match="changed while it was replayed"):
        list(stream_trace_requests(path, TOK, base_seed=SEED))
