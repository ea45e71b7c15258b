"""The serve and http targets over loopback HTTP against kvbudget's embedded engine server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.cli.main import main

REPO = Path(__file__).resolve().parents[3]


def tiny_plan(target: dict[str, Any], quality: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    load = data["load"]
    load.update(
        repetitions=1, max_requests_per_cell=4, shared_prefix={"tokens": 0}, cancel_fraction=0.0
    )
    load["warmup"] = {"requests": 1, "input_tokens": 16, "output_tokens": 4}
    for tier in load["tiers"].values():
        tier.update(min_tokens=16, max_tokens=48, output_tokens=6)
    for tier in load["concurrency"].values():
        tier.update(duration_s=3, concurrency=min(tier["concurrency"], 4))
        if tier["arrival"] == "poisson":
            tier["rate_per_s"] = 8
    data["target"] = target
    data["quality"] = quality
    data["stop"]["any_quality_failure"] = True
    data["comparisons"] = []
    return data


def run_plan(data: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(["accept", str(plan), "--out", str(out), "--quiet"])
    assert info.value.code == 0
    doc: dict[str, Any] = json.loads((out / "report.json").read_text())
    return doc


@pytest.fixture
def served() -> Iterator[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvbudget",
            "serve",
            "--model",
            "tiny",
            "--port",
            "0",
            "--step-ms",
            "2",
            "--max-model-len",
            "4096",
            "--speedup",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_serve_target_runs_nine_cells_labelled_simulated(tmp_path: Path) -> None:
    doc = run_plan(tiny_plan({"kind": "serve", "speedup": 20}, []), tmp_path)
    assert doc["target"]["kind"] == "serve"
    assert doc["provenance"]["kind"] == "simulated"
    assert len(doc["cells"]) == 9
    assert all(c["num_requests"] > 0 for c in doc["cells"])
    records = [json.loads(x) for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert records and all(r["source"] == "simulated" for r in records)
    assert all(r["output_text"] is None for r in records)


@pytest.mark.slow
def test_http_target_on_kvbudget_serve_is_simulated(served: str, tmp_path: Path) -> None:
    """kind: http pointed at kvbudget serve is still the simulator: nothing it returns is a
    measurement, and its synthetic text leaves quality untested (never pass, never fail)."""
    quality = [{"id": "capital", "kind": "exact", "expected": "Paris", "tiers": ["short"]}]
    target = {"kind": "http", "base_url": served, "served_model": "tiny"}
    doc = run_plan(tiny_plan(target, quality), tmp_path)
    assert doc["provenance"]["kind"] == "simulated"
    assert doc["provenance"]["timing_model"].startswith("fixed(step=0.002s")
    assert doc["target"]["synthetic_text"] is True
    for cell in doc["cells"]:
        assert cell["kind"] == "simulated"
        for q in cell["quality"]:
            assert q["verdict"] == "untested", q
    records = [json.loads(x) for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert records and all(r["source"] == "simulated" for r in records)
    # issue #32 item 4: the served pool (serve's manual default, 8,192 blocks, read from its
    # kvbudget:num_total_blocks gauge) beside the plan's (Llama-3.1-8B on one H100): a mismatch
    # the report names and that blocks, never an empty engine column
    (row,) = [r for r in doc["pool"] if r["field"] == "num_blocks"]
    assert row["engine_reported"] == 8192 and row["source"] == "/metrics kvbudget:num_total_blocks"
    assert row["planned"] != 8192 and row["match"] is False
    assert any(b.startswith("pool.num_blocks: plan computes") for b in doc["blocking"])


@pytest.fixture
def stand_in_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let kvbudget serve stand in for a real engine: its /version 'engine' is hidden, so the
    http target takes the measured path (the one a real vLLM/SGLang/llama.cpp takes)."""
    from kvbudget.accept.targets import http as http_target
    from kvbudget.load.identity import server_identity as real

    async def disguised(client: Any) -> dict[str, Any]:
        ident = await real(client)
        if ident.get("engine") == "kvbudget-serve":
            ident["engine"] = "stand-in-engine"
        return ident

    monkeypatch.setattr(http_target, "server_identity", disguised)


@pytest.mark.slow
@pytest.mark.usefixtures("stand_in_engine")
def test_http_target_judges_quality_on_the_timed_requests(served: str, tmp_path: Path) -> None:
    prompt = tmp_path / "capital.txt"
    prompt.write_text("What is the capital of France? Answer with one word.", encoding="utf-8")
    quality = [
        {
            "id": "capital",
            "kind": "exact",
            "expected": "Paris",
            "tiers": ["short"],
            "prompt_file": str(prompt),
        }
    ]
    profile = tmp_path / "profile.json"
    profile.write_text(
        json.dumps(
            {
                "name": "tiny-fit",
                "model_id": "tiny",
                "gpu": "loopback",
                "engine": "kvbudget-serve",
                "prefill_points": [[16, 0.002], [256, 0.003], [1024, 0.006]],
                "decode_points": [[1, 100, 0.002], [4, 400, 0.0022], [8, 800, 0.0025]],
            }
        )
    )
    target = {
        "kind": "http",
        "base_url": served,
        "served_model": "tiny",
        "metrics_url": f"{served}/metrics",
        "profile": str(profile),
    }
    doc = run_plan(tiny_plan(target, quality), tmp_path)
    assert doc["provenance"]["kind"] == "measured"
    assert doc["baseline"]["kv_usage"] == 0.0  # idle baseline scraped from /metrics before load
    short = [c for c in doc["cells"] if c["input_tier"] == "short"]
    for cell in short:
        (q,) = cell["quality"]
        # the embedded server writes synthetic text, so a real judge must fail it
        assert q["verdict"] == "fail", q
        assert "outputs failed" in q["reason"]
        assert cell["verdict"] == "fail"
        assert cell["output_excerpts"] == []  # outputs stay private without --keep-prompts
    stops = {s["name"]: s for s in doc["stop_conditions"]}
    assert stops["quality failure"]["status"] == "triggered"
    assert doc["verdict"] == "fail"
    lock = {e["field"]: e for e in doc["lock"]}
    assert lock["engine.name"]["status"] == "mismatch"  # plan says vllm, server another
    assert any(c["timeseries"]["kv_usage"] for c in doc["cells"])
    # a profile on a measured run: every measured cell carries the calibrated prediction
    predicted = [c for c in doc["cells"] if c["prediction"]]
    assert len(predicted) == 9
    q = predicted[0]["prediction"]["quantities"]["ttft_p50_s"]
    assert q["measured"] > 0 and q["predicted"] > 0
    assert q["relative_error"] == pytest.approx((q["predicted"] - q["measured"]) / q["measured"])
    assert predicted[0]["prediction"]["model"].startswith("calibrated (tiny-fit")
    assert "vs measured" in (tmp_path / "out" / "report.md").read_text()
    records = (tmp_path / "out" / "records.jsonl").read_text()
    assert "capital of France" not in records  # prompts stay private by default
    assert "/quality:capital" in records
