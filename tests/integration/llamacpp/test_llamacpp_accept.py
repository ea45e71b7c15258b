"""`kvbudget accept` with ``target: http`` against a real engine (llama.cpp server, CPU).

A small nine-cell plan (three input tiers x three concurrency tiers, short durations) must run to
completion, every cell must have records, and the report must label its figures as measured,
naming the engine and the version the server itself reports (``llama-server --version`` is the
independent source of the version string).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.engines import run_kvbudget_accept

pytestmark = pytest.mark.llamacpp

CELLS = [f"{i}/{c}" for i in ("short", "medium", "long") for c in ("single", "normal", "peak")]


def small_plan(server: Any, model_config: Path) -> dict[str, Any]:
    flags = server.args
    return {
        "schema_version": 1,
        "name": "llamacpp-tiny-cpu",
        "description": "Nine small cells against llama.cpp llama-server on CPU (tiny random model).",
        "seed": 7,
        "target": {
            "kind": "http",
            "base_url": server.base_url,
            "metrics_url": server.base_url + "/metrics",
            "served_model": "tiny-llama",
            "request_timeout_s": 120,
        },
        "lock": {
            "model": {"id": str(model_config), "config_sha256": "auto"},
            "engine": {"name": "llama.cpp", "flags": flags},
            "gpu": {
                "type": {"value": None, "status": "not_applicable", "note": "CPU llama-server"},
                "count": {"value": None, "status": "not_applicable", "note": "CPU llama-server"},
                "driver": {"value": None, "status": "not_applicable", "note": "CPU llama-server"},
            },
            "kv_dtype": "f16",
            "max_model_len": 2048,
            "max_num_seqs": 4,
            # vLLM knobs that mean nothing to llama-server:
            "block_size": {"value": None, "status": "not_applicable", "note": "llama.cpp cells"},
            "gpu_memory_utilization": {"value": None, "status": "not_applicable", "note": "CPU"},
        },
        "load": {
            "template_version": "raw-completions",
            "repetitions": 1,
            "max_requests_per_cell": 6,
            "warmup": {"requests": 2, "input_tokens": 32, "output_tokens": 4},
            "tiers": {
                "short": {"min_tokens": 16, "max_tokens": 48, "output_tokens": 8},
                "medium": {"min_tokens": 96, "max_tokens": 192, "output_tokens": 8},
                "long": {"min_tokens": 384, "max_tokens": 640, "output_tokens": 8},
            },
            "concurrency": {
                "single": {"concurrency": 1, "duration_s": 2, "arrival": "closed"},
                "normal": {"concurrency": 2, "duration_s": 2, "arrival": "closed"},
                "peak": {"concurrency": 4, "duration_s": 2, "arrival": "burst"},
            },
        },
        "stop": {
            "ttft_s": {"p95": 60.0},
            "error_rate_max": 0.5,
            "any_oom": True,
        },
    }


def figure_kinds(node: Any, path: str = "") -> list[tuple[str, str]]:
    """(json path, kind) of every provenance/figure label in a document."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}.{key}"
            if key in ("kind", "source") and value in ("computed", "simulated", "measured"):
                found.append((path, value))
            else:
                found.extend(figure_kinds(value, sub))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(figure_kinds(value, f"{path}[{i}]"))
    return found


def test_accept_http_runs_nine_cells_and_labels_figures_measured(
    shared_llama_server: Any, llamacpp: Any, tmp_path: Path
) -> None:
    server = shared_llama_server
    model_config = llamacpp.model("llama").with_suffix(".config.json")
    out = tmp_path / "accept"
    report = run_kvbudget_accept(small_plan(server, model_config), out)

    # The document's provenance: measured, naming the engine and the version the server reports.
    prov = report["provenance"]
    assert prov["kind"] == "measured"
    assert "llama" in (prov.get("engine") or "").lower()
    # `llama-server --version` prints "version: 0.5.0-dev (build 1, commit 0c1e570)"; over HTTP the
    # server reports the same build as /props build_info "b1-0c1e570".
    commit = re.search(r"commit (\w+)", server.version)
    assert commit is not None, server.version
    assert commit.group(1) in (prov.get("engine_version") or ""), (prov, server.version)

    # Nothing in it is simulated; everything that is not arithmetic is measured.
    kinds = figure_kinds(report)
    assert kinds, "no labelled figures in report.json"
    assert not [p for p, k in kinds if k == "simulated"], [p for p, k in kinds if k == "simulated"]
    assert any(k == "measured" for _, k in kinds)

    # All nine cells ran against the engine, every request of them answered.
    cells = {c["cell_id"]: c for c in report["cells"]}
    assert sorted(cells) == sorted(CELLS)
    for cell_id, cell in cells.items():
        assert cell["kind"] == "measured", cell_id
        assert cell["num_requests"] >= 1 and cell["num_ok"] == cell["num_requests"], cell_id
    assert report["target"]["kind"] == "http" and report["target"]["source"] == "measured"

    # And the per-request records say the same.
    records_file = out / "records.jsonl"
    records = [json.loads(x) for x in records_file.read_text().splitlines() if x.strip()]
    assert records and all(r["source"] == "measured" for r in records)
    cells_seen = {r.get("cell_id") or r.get("scenario_id") for r in records}
    for cell in CELLS:
        assert any(cell in str(c) for c in cells_seen), (
            f"no records for cell {cell}: {sorted(map(str, cells_seen))}"
        )

    md = (out / "report.md").read_text()
    assert "measured" in md and commit.group(1) in md


def test_accept_with_a_llamacpp_profile_predicts_on_the_slot_engine(
    shared_llama_server: Any, llamacpp: Any, tmp_path: Path
) -> None:
    """A profile measured on llama.cpp: every measured cell carries a prediction made on the
    llama.cpp slot engine with the profile's slot settings, from the prompt token counts the
    server itself reported (usage.prompt_tokens), not kvbudget's own count."""
    server = shared_llama_server
    model_config = llamacpp.model("llama").with_suffix(".config.json")
    per_token_s = 1e-4
    profile = tmp_path / "profile.json"
    profile.write_text(
        json.dumps(
            {
                "name": "hand",
                "model_id": "tiny-llama",
                "gpu": "cpu",
                "engine": "llama.cpp b1",
                "prefill_points": [[16, 0.002], [256, 0.03], [1024, 0.11]],
                "decode_points": [[1, 100, 0.002], [2, 200, 0.004], [4, 400, 0.008]],
                # a single prompt of P tokens costs exactly P x per_token_s (no step overhead)
                "fit": {
                    "step_overhead_s": 0.0,
                    "prefill_per_token_s": per_token_s,
                    "prefill_per_pair_s": 0.0,
                    "decode_per_seq_s": 0.002,
                    "decode_per_context_token_s": 0.0,
                },
                # the server's flags: -c 8192 -np 4 -> 4 slots of 2048 cells; -b/-ub defaults
                "engine_settings": {
                    "num_slots": 4,
                    "n_ctx_slot": 2048,
                    "n_batch": 2048,
                    "n_ubatch": 512,
                },
                "request_overhead_s": 0.0,
            }
        )
    )
    plan = small_plan(server, model_config)
    plan["target"]["profile"] = str(profile)
    out = tmp_path / "accept"
    report = run_kvbudget_accept(plan, out)
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x.strip()]
    cells = {c["cell_id"]: c for c in report["cells"]}
    behaviour = "llama.cpp slots (4 x 2048 cells, n_batch 2048, n_ubatch 512)"
    for cell_id in CELLS:
        pred = cells[cell_id]["prediction"]
        assert pred, f"{cell_id}: no prediction"
        assert pred["kind"] == "simulated" and pred["engine_behaviour"] == behaviour, pred
        assert behaviour in pred["model"]
    # single-concurrency cells: each prompt runs alone, so the predicted TTFT p50 is
    # per_token_s x the median of the prompt lengths the server reported for that cell
    ratios = []
    for cell_id in ("short/single", "medium/single", "long/single"):
        served = [
            r["prompt_tokens"]
            for r in records
            if r.get("cell_id") == cell_id and not r.get("warmup") and r["status"] == "ok"
        ]
        assert served and all(isinstance(n, int) and n > 0 for n in served), cell_id
        q = cells[cell_id]["prediction"]["quantities"]["ttft_p50_s"]
        assert q["predicted"] == pytest.approx(per_token_s * float(np.median(served)), rel=1e-6)
        assert q["measured"] > 0
        tier = plan["load"]["tiers"][cell_id.split("/")[0]]
        ratios.append(float(np.median(served)) / ((tier["min_tokens"] + tier["max_tokens"]) / 2))
    # recorded, not asserted: llama.cpp's tokenizer counts kvbudget's synthetic text differently
    print(f"server prompt tokens / planned tier midpoint: {[round(r, 2) for r in ratios]}")
    md = (out / "report.md").read_text()
    assert "vs measured" in md and behaviour in md
