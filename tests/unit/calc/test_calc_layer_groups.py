"""Issue 16: the explicit formula is one layer group, so a huge ``--layers`` costs nothing.

Expected bytes are hand arithmetic of the seed formula ``2 x layers x kv_heads x head_dim x
dtype_bytes x tokens x seqs``; memory is measured with ``tracemalloc`` (no wall-clock asserts).
"""

from __future__ import annotations

import json

from kvbudget.capacity.kvbytes import calc_explicit, layer_ranges
from tests.unit.calc.helpers_calc import traced

from .helpers_calc import run_main


def test_hundred_million_layers_answers_with_one_group() -> None:
    code, out, err = run_main(
        [
            "calc",
            "--layers",
            "100000000",
            "--kv-heads",
            "8",
            "--head-dim",
            "128",
            "--dtype-bytes",
            "2",
            "--tokens",
            "4096",
            "--json",
        ]
    )
    assert code == 0, err
    doc = json.loads(out)
    # 2 x 1e8 x 8 x 128 x 2 = 409,600,000,000 B/token; x 4096 = 1,677,721,600,000,000
    assert doc["bytes_per_token"] == 409_600_000_000
    assert doc["total_bytes"] == 1_677_721_600_000_000
    assert doc["groups"][0]["layer_ranges"] == [[0, 100_000_000]]
    assert doc["groups"][0]["num_layers"] == 100_000_000


def test_explicit_memory_does_not_grow_with_layers() -> None:
    _, peak = traced(
        lambda: calc_explicit(
            num_layers=2**31 - 1, num_kv_heads=8, head_dim=128, dtype_bytes=2, tokens=8, seqs=1
        )
    )
    assert peak < 1_000_000, f"{peak} bytes traced for one explicit calculation"


def test_layers_beyond_the_dimension_bound_is_one_line() -> None:
    argv = ["calc", "--layers", str(2**31), "--kv-heads", "8", "--head-dim", "128"]
    code, out, err = run_main([*argv, "--dtype-bytes", "2", "--tokens", "8"])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and "layers" in lines[0]


def test_layer_ranges_are_half_open_runs() -> None:
    assert layer_ranges((0, 1, 2, 5)) == [[0, 3], [5, 6]]
    assert layer_ranges(()) == []


def test_model_mode_groups_list_ranges() -> None:
    code, out, _ = run_main(["calc", "--model", "google/gemma-2-9b", "--tokens", "8192", "--json"])
    assert code == 0
    groups = json.loads(out)["groups"]
    # Gemma-2: 42 layers alternating sliding (even) and full (odd), transformers' layer_types
    sliding = next(g for g in groups if g["kind"] == "sliding")
    assert sliding["layer_ranges"][:2] == [[0, 1], [2, 3]] and len(sliding["layer_ranges"]) == 21
