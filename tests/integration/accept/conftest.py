"""A small simulated acceptance plan shared by the accept integration tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def small_plan_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    load = data["load"]
    load["repetitions"] = 1
    load["max_requests_per_cell"] = 12
    load["warmup"] = {"requests": 2, "input_tokens": 64, "output_tokens": 8}
    load["tiers"]["short"].update(min_tokens=128, max_tokens=256, output_tokens=16)
    load["tiers"]["medium"].update(min_tokens=1024, max_tokens=2048, output_tokens=16)
    load["tiers"]["long"].update(min_tokens=4096, max_tokens=8192, output_tokens=16)
    for tier in load["concurrency"].values():
        tier["duration_s"] = 5
    load["concurrency"]["peak"]["concurrency"] = 12
    data["comparisons"] = [
        {
            "name": "fp8-kv",
            "factor": "kv_dtype",
            "set": {"kv_dtype": "fp8"},
            "cells": ["medium/normal"],
            "metrics": ["ttft_s", "tpot_s"],
        },
        {"name": "two-changes", "factor": "kv_dtype", "set": {"kv_dtype": "fp8", "block_size": 32}},
    ]
    return data


@pytest.fixture(scope="session")
def small_plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "small.yaml"
    path.write_text(yaml.safe_dump(small_plan_data()), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def small_run(small_plan_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kvbudget.cli.main import main

    out = tmp_path_factory.mktemp("run")
    # the roofline, pinned: test_accept_end_to_end derives the fp8-KV comparison's outcome from
    # its formula (docs/simulator.md); accept's sim target takes the choice from the environment
    with pytest.MonkeyPatch.context() as env, pytest.raises(SystemExit) as info:
        env.setenv("KVBUDGET_TIMING_MODEL", "roofline")
        main(["accept", str(small_plan_file), "--out", str(out), "--quiet"])
    assert info.value.code == 0
    return out


@pytest.fixture
def plan_data() -> dict[str, Any]:
    """A fresh copy of the small plan's data (mutable)."""
    return small_plan_data()
