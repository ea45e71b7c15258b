"""`kvbudget calibrate --validate` against a real vLLM 0.32.0 (CPU build).

Runs on the suite's shared default server (one start for the bench, audit and calibrate
modules). Independent sources: the engine's own ``/metrics``, scraped by the test before and
after (``vllm:request_success_total``, ``vllm:request_prefill_time_seconds_count``,
``vllm:prefix_cache_hits_total``, ``vllm:cache_config_info``).

* the profile is fitted from vLLM's histograms (``timings_source: metrics``), and the pool it
  records for the paged prediction is the one the engine reports (``num_gpu_blocks``,
  ``block_size``) — read by the test from ``vllm:cache_config_info`` itself;
* the engine really served the series and the cells: its success counter grew by at least the
  cells' requests, its prefill histogram counted them, and its prefix-cache hit counter moved
  (the ``prefix`` probes reuse their base);
* every cell is measured (source ``measured``, engine ``vllm 0.32.0``) and predicted on the
  vLLM-style paged engine, with finite relative errors for every p50.

The prediction error itself is reported (docs/calibration.md's table, from
``bench/vllm_calibrate.py``'s raw file), never asserted: it moves with the machine's load.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

SUCCESS = "vllm:request_success_total"
PREFILL_COUNT = "vllm:request_prefill_time_seconds_count"
HITS = "vllm:prefix_cache_hits_total"


def cache_info_label(server: Any, label: str) -> str:
    match = re.search(rf'vllm:cache_config_info\{{[^}}]*\b{label}="([^"]*)"', server.metrics_text())
    assert match, f"vllm:cache_config_info has no {label} label"
    return match.group(1)


def test_calibrate_validate_fits_from_vllm_histograms(vllm_server: Any, tmp_path: Path) -> None:
    server = vllm_server
    before = server.metrics()
    out = tmp_path / "validation.json"
    cmd = [sys.executable, "-m", "kvbudget", "calibrate", "--validate"]
    cmd += ["--base-url", server.base_url, "--model", server.served_model_name]
    cmd += ["--metrics-url", server.base_url + "/metrics", "--out", str(out)]
    cmd += ["--repeats", "1", "--output-tokens", "8"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, f"calibrate failed ({done.returncode}):\n{done.stderr[-3000:]}"
    after = server.settled_metrics(SUCCESS, before.get(SUCCESS, 0.0) + 1)
    report = json.loads(out.read_text(encoding="utf-8"))

    profile = report["profile"]
    assert profile["engine"] == "vllm 0.32.0" and report["engine"] == "vllm 0.32.0"
    assert report["source"] == "measured"
    settings = profile["engine_settings"]
    assert settings["timings_source"] == "metrics"
    assert settings["num_gpu_blocks"] == int(cache_info_label(server, "num_gpu_blocks"))
    assert settings["block_size"] == int(cache_info_label(server, "block_size"))
    assert settings["vocab_size"] == 2048  # scripts/tiny_hf_model.py's default vocabulary

    cells = report["cells"]
    assert [c["role"] for c in cells].count("held-out") == 3 and len(cells) == 6
    cell_requests = sum(c["num_requests"] for c in cells)
    assert after[SUCCESS] - before.get(SUCCESS, 0.0) >= cell_requests
    assert after[PREFILL_COUNT] - before.get(PREFILL_COUNT, 0.0) >= cell_requests
    assert after[HITS] - before.get(HITS, 0.0) > 0  # the prefix probes found their base
    for cell in cells:
        assert cell["measured"]["num_requests"] == cell["num_requests"]
        assert cell["measured"]["source"].startswith("measured (vllm 0.32.0")
        assert "vLLM-style paged blocks" in cell["predicted"]["source"]
    p50s = [e for e in report["errors"] if e["metric"] in ("ttft_p50_s", "tpot_p50_s")]
    assert len(p50s) == 12
    missing = [
        (e["cell_id"], e["metric"], e["measured"])
        for e in p50s
        if e["rel_error"] is None or not math.isfinite(e["rel_error"])
    ]
    assert not missing, f"p50s without a relative error: {missing}; warnings: " + str(
        [w for c in cells for w in c["warnings"]]
    )
    worst = report["held_out_max_abs_rel_error"]
    assert report["target_met"] == (max(worst.values()) <= report["target_rel_error"])
