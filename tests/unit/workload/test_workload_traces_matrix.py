"""JSONL traces (block hash ids, privacy, replay)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from kvbudget.errors import ConfigError
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.spec import generate, workload_from_dict
from kvbudget.workload.traces import block_chain_hashes, export_trace, read_trace


def req(rid: str, ids: tuple[int, ...], salt: str | None = None, t: float = 0.0) -> PlannedRequest:
    return PlannedRequest(
        request_id=rid, arrival_s=t, prompt_token_ids=ids, output_tokens=2, cache_salt=salt
    )


def test_hash_ids_follow_shared_blocks(tmp_path: Path) -> None:
    a = tuple(range(10, 20))  # blocks of 4: [10..13] [14..17] [18,19]
    b = (*range(10, 18), 99, 98, 97)  # shares the first two blocks with a
    c = a  # same tokens, different salt: nothing shared
    path = tmp_path / "t.jsonl"
    export_trace(
        [req("a", a), req("b", b, t=1.0), req("c", c, salt="s", t=2.0)], path, block_size=4
    )
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["hash_ids"] for x in lines] == [[0, 1, 2], [0, 1, 3], [4, 5, 6]]
    assert "prompt_token_ids" not in lines[0]
    assert lines[0]["prompt_sha256"] == hashlib.sha256(req("a", a).text().encode()).hexdigest()
    # hand-worked chain hash of block 0 of a
    h0 = hashlib.sha256(b"" + np.asarray(a[:4], dtype="<u4").tobytes()).digest()
    assert block_chain_hashes(a, 4)[0] == h0


def test_replay_reproduces_sharing(tmp_path: Path) -> None:
    data = {
        "num_requests": 30,
        "arrivals": {"kind": "poisson", "rate_per_s": 5.0},
        "input_tokens": {"kind": "fixed", "value": 64},
        "output_tokens": {"kind": "fixed", "value": 3},
        "prefix": {"num_groups": 3, "group_prefix_tokens": 32},
    }
    orig = generate(workload_from_dict(data), np.random.default_rng(2))
    path = tmp_path / "w.jsonl"
    assert export_trace(orig, path, block_size=16) == 30
    replay_spec = workload_from_dict({"trace": {"path": str(path), "block_size": 16}})
    back = generate(replay_spec, np.random.default_rng(9))
    assert len(back) == 30
    assert [r.arrival_s for r in back] == pytest.approx(
        [r.arrival_s - orig[0].arrival_s for r in orig]
    )
    for x, y in [(0, 1), (0, 5), (3, 7)]:
        same_orig = orig[x].prompt_token_ids[:32] == orig[y].prompt_token_ids[:32]
        same_back = back[x].prompt_token_ids[:32] == back[y].prompt_token_ids[:32]
        assert same_orig == same_back
    assert all(r.prompt_tokens == 64 and r.output_tokens == 3 for r in back)


def test_keep_prompts_roundtrip_and_mooncake(tmp_path: Path) -> None:
    path = tmp_path / "k.jsonl"
    export_trace([req("a", (5, 6, 7))], path, keep_prompts=True)
    assert read_trace(path)[0].prompt_token_ids == [5, 6, 7]
    moon = tmp_path / "m.jsonl"
    moon.write_text(
        '{"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
        '{"timestamp": 500, "input_length": 700, "output_length": 6, "hash_ids": [0, 2]}\n'
    )
    spec = workload_from_dict({"trace": {"path": str(moon), "block_size": 512, "speedup": 3.0}})
    out = generate(spec, np.random.default_rng(0))
    assert [r.arrival_s for r in out] == pytest.approx([0.0, 0.5])
    assert [r.prompt_tokens for r in out] == [700, 600]
    assert out[0].prompt_token_ids[:512] == out[1].prompt_token_ids[:512]
    assert out[0].prompt_token_ids[512:600] != out[1].prompt_token_ids[512:600]


def test_bad_trace_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_length": 0, "output_length": 1}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: field input_length"):
        read_trace(bad)
    bad.write_text("{nope\n")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_trace(bad)
