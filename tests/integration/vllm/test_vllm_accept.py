"""`kvbudget accept` with ``target: http`` against a real vLLM 0.32.0 (CPU build), twice.

A small nine-cell plan runs against the suite's default engine (prefix caching on) and against a
second start with ``--no-enable-prefix-caching``; ``kvbudget report --compare`` then compares the
two finished runs on the single factor ``prefix_caching``. Checked, against independent sources:

* the report is labelled measured, naming vLLM and the version its ``/version`` reports;
* the lock is confirmed by the engine: ``block_size``, ``kv_dtype``, ``max_model_len``,
  ``kv_cache_memory_bytes`` and ``prefix_caching`` carry the engine's values with their
  ``cache_config_info`` / ``/v1/models`` source, and nothing the engine reports is blocking;
* the planned pool equals the engine-reported pool (the engine's own log is the oracle);
* every cell's prompts, as the server counted them, fall inside the tier's bounds;
* prefix caching on vs off: the engine's hit counter moved in the first run, not in the second,
  and the comparison is comparable (the locks differ only in ``prefix_caching``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.engines import run_kvbudget_accept

# an engine start takes 30-90 s (minutes on a busy machine): generous per-test limits
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(2400)]

CELLS = [f"{i}/{c}" for i in ("short", "medium", "long") for c in ("single", "normal", "peak")]
NA = {"value": None, "status": "not_applicable"}


def nine_cell_plan(server: Any, *, prefix_caching: bool) -> dict[str, Any]:
    launch = {"status": "confirmed", "source": "the test's own launch command"}
    return {
        "schema_version": 1,
        "name": "vllm-cpu-tiny" + ("" if prefix_caching else "-no-prefix-caching"),
        "description": "Nine small cells against vLLM 0.32.0 CPU (tiny dummy-weight llama).",
        "seed": 7,
        "target": {
            "kind": "http",
            "base_url": server.base_url,
            "metrics_url": server.base_url + "/metrics",
            "served_model": server.served_model_name,
            "request_timeout_s": 300,
        },
        "lock": {
            "model": {
                "id": str(server.model / "config.json"),
                "config_sha256": "auto",
                "revision": {**NA, "note": "a local directory built by the test"},
            },
            "engine": {
                "name": "vllm",
                "version": "0.32.0",
                "container": {**NA, "note": "a local venv (scripts/vllm-cpu.sh), no container"},
                "flags": {**NA, "note": "pool flags are read back from the engine instead"},
            },
            "gpu": {
                "type": {**NA, "note": "vLLM CPU build"},
                "count": {**NA, "note": "vLLM CPU build"},
                "driver": {**NA, "note": "vLLM CPU build"},
            },
            "tensor_parallel": {"value": 1, **launch},
            "pipeline_parallel": {"value": 1, **launch},
            "kv_dtype": "auto",
            "max_model_len": 4096,
            "block_size": 128,
            "kv_cache_memory_bytes": 1 << 30,  # VLLM_CPU_KVCACHE_SPACE=1
            "prefix_caching": {"value": {"enabled": prefix_caching, "salt": "none"}},
            "gpu_memory_utilization": {**NA, "note": "CPU: VLLM_CPU_KVCACHE_SPACE sizes the pool"},
            "max_num_seqs": {"value": 128, **launch},
            "max_num_batched_tokens": {"value": 2048, **launch},
            "offload": {"value": "none", **launch},
            "router_policy": {"value": "none", **launch},
        },
        "load": {
            "template_version": "raw-completions",
            "repetitions": 1,
            "max_requests_per_cell": 4,
            "warmup": {"requests": 1, "input_tokens": 32, "output_tokens": 2},
            "shared_prefix": {"tokens": 128},
            "tiers": {
                "short": {"min_tokens": 160, "max_tokens": 256, "output_tokens": 4},
                "medium": {"min_tokens": 384, "max_tokens": 512, "output_tokens": 4},
                "long": {"min_tokens": 768, "max_tokens": 1024, "output_tokens": 4},
            },
            "concurrency": {
                "single": {"concurrency": 1, "duration_s": 2, "arrival": "closed"},
                "normal": {"concurrency": 2, "duration_s": 2, "arrival": "closed"},
                "peak": {"concurrency": 4, "duration_s": 2, "arrival": "burst"},
            },
        },
        "stop": {"ttft_s": {"p95": 120.0}, "error_rate_max": 0.5, "any_oom": True},
    }


@pytest.fixture(scope="module")
def no_prefix_server(
    vllm: Any, vllm_launcher: Any, tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("vllm-noprefix") / "vllm.log"
    with vllm_launcher.start_server(
        vllm, tiny_llama, log, ["--no-enable-prefix-caching"]
    ) as server:
        yield server


def run_accept(server: Any, out: Path, *, prefix_caching: bool) -> dict[str, Any]:
    plan = nine_cell_plan(server, prefix_caching=prefix_caching)
    return run_kvbudget_accept(plan, out, timeout_s=1800)


def check_measured_and_confirmed(doc: dict[str, Any], server: Any) -> None:
    prov = doc["provenance"]
    assert prov["kind"] == "measured" and prov["engine"] == "vllm"
    assert prov["engine_version"] == server.get_json("/version")["version"] == "0.32.0"
    lock = {e["field"]: e for e in doc["lock"]}
    for name in ("block_size", "kv_dtype", "max_model_len", "kv_cache_memory_bytes"):
        assert lock[name]["status"] == "confirmed", lock[name]
        assert "engine-reported" in lock[name]["source"], lock[name]
    assert "cache_config_info block_size" in lock["block_size"]["source"]
    assert lock["block_size"]["value"] == 128 and lock["kv_cache_memory_bytes"]["value"] == 1 << 30
    assert lock["prefix_caching"]["status"] == "confirmed"
    assert lock["engine.version"]["status"] == "confirmed"
    assert doc["blocking"] == [], doc["blocking"]
    assert doc["verdict"] != "blocked", doc["verdict_reasons"]
    # planned pool vs the engine's: the engine's log line is the oracle
    log = server.kv_log()
    pool = {r["field"]: r for r in doc["pool"]}
    assert pool["kv_cache_tokens"]["engine_reported"] == log.kv_cache_size_tokens
    assert pool["kv_cache_tokens"]["planned"] == log.kv_cache_size_tokens
    assert pool["num_blocks"]["match"] is True and pool["block_size"]["match"] is True
    cells = {c["cell_id"]: c for c in doc["cells"]}
    assert sorted(cells) == sorted(CELLS)
    for cell_id, cell in cells.items():
        assert cell["kind"] == "measured", cell_id
        assert cell["num_requests"] >= 1 and cell["num_ok"] == cell["num_requests"], cell_id
        # prompt lengths as the server counted them fall inside the tier
        assert cell["prompt_tokens_in_tier"]["within"] is True, (cell_id, cell)


def test_accept_nine_cells_prefix_caching_on_vs_off(
    vllm_server: Any, no_prefix_server: Any, tmp_path: Path
) -> None:
    hits = "vllm:prefix_cache_hits_total"
    on_before = vllm_server.metrics().get(hits, 0.0)
    on = run_accept(vllm_server, tmp_path / "on", prefix_caching=True)
    on_hits = vllm_server.metrics().get(hits, 0.0) - on_before
    off_before = no_prefix_server.metrics().get(hits, 0.0)
    off = run_accept(no_prefix_server, tmp_path / "off", prefix_caching=False)
    off_hits = no_prefix_server.metrics().get(hits, 0.0) - off_before
    check_measured_and_confirmed(on, vllm_server)
    check_measured_and_confirmed(off, no_prefix_server)
    assert on_hits > 0 and off_hits == 0  # the engine's own counter: the factor took effect
    assert any((c["prefix_hit_rate_tokens"] or 0) > 0 for c in on["cells"])
    assert all(not c["prefix_hit_rate_tokens"] for c in off["cells"])
    md = (tmp_path / "on" / "report.md").read_text()
    assert "KV pool: planned (computed) vs engine-reported (measured)" in md

    compare = tmp_path / "compare"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvbudget",
            "report",
            str(tmp_path / "on" / "report.json"),
            "--compare",
            str(tmp_path / "off" / "report.json"),
            "--factor",
            "prefix_caching",
            "--out",
            str(compare),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((compare / "report.json").read_text())
    (comparison,) = result["comparisons"]
    assert comparison["verdict"] != "not_comparable", comparison["reasons"]
