"""docs/accuracy.md's pool table is bench/results/pool_accuracy.json as bench/pool_accuracy.py
renders it (no figure typed by hand), and that raw file still says what the code predicts."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.repo_scripts import load_script

REPO = Path(__file__).resolve().parents[3]


def _bench() -> ModuleType:
    return load_script("bench/pool_accuracy.py")


def test_doc_block_is_the_rendered_raw_file() -> None:
    bench = _bench()
    data = json.loads((REPO / "bench/results/pool_accuracy.json").read_text("utf-8"))
    before = json.loads(bench.BEFORE.read_text("utf-8"))
    text = (REPO / "docs" / "accuracy.md").read_text("utf-8")
    assert "## Pool" in text
    assert bench.doc_block(data, before) in text, "run: python bench/pool_accuracy.py --write-doc"


def test_raw_file_matches_the_code() -> None:
    bench = _bench()
    data = json.loads((REPO / "bench/results/pool_accuracy.json").read_text("utf-8"))
    runs = bench.load_runs()
    for run, row in zip(runs, data["runs"], strict=True):
        if "available_kv_gib" not in row:
            continue
        pred = bench.predict(run, data["engine_version"])
        assert pred["available_kv_gib"] == pytest.approx(row["available_kv_gib"][0], abs=1e-9)
        assert pred["kv_tokens"] == row["kv_tokens"][0]
