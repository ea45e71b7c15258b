"""DeepSeek-V4 with two MTP modules, and with the hybrid manager off, computed by vLLM 0.32's own
code (``scripts/check_dsv4_vllm_mtp.py``, run in vLLM's venv on the tiny ``deepseek_v4`` model's
specs, built with the arguments each cache layer passes: vLLM's CPU build does not run
DeepSeek-V4's MTP drafter). kvbudget's plan must equal it: the group pages, the bytes per block,
the blocks one request is admitted with when every sliding spec keeps ``extra_retained_tokens``
(0 with one token, 1 with two, ``v1/core/kv_cache_utils.py`` lines 2583-2590), and the refusal
of ``--disable-hybrid-kv-cache-manager`` quotes the error vLLM raises.

Marked ``vllm``: it FAILS (never skips) when the vLLM CPU venv is missing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.units import GiB

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "peer" / "fixtures" / "vllm_pools_0.32.0.json"


def _vllm(vllm: Any) -> dict[str, Any]:
    proc = subprocess.run(
        [str(vllm.python), str(ROOT / "scripts" / "check_dsv4_vllm_mtp.py")],
        capture_output=True,
        text=True,
        timeout=500,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("KVB_RESULT "):
            found: dict[str, Any] = json.loads(line.removeprefix("KVB_RESULT "))
            return found
    raise AssertionError(f"vLLM's code did not run: {proc.stderr[-2000:]}")


def _plan(tmp_path: Path, **extra: Any) -> Any:
    config = json.loads(FIXTURE.read_text("utf-8"))["cases"]["deepseek_v4"]["config"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "num_nextn_predict_layers": 2}), encoding="utf-8")
    fields: dict[str, Any] = {
        "model": str(path),
        "engine": "vllm",
        "engine_version": "0.32.0",
        "kv_cache_memory_bytes": 1 * GiB,
        "max_model_len": 4096,
        "max_num_batched_tokens": 1025,
        **extra,
    }
    return make_plan(PlanRequest(**fields))


def test_several_mtp_modules_and_the_hybrid_manager_off_equal_vllm(
    vllm: Any, tmp_path: Path
) -> None:
    want = _vllm(vllm)
    for tokens, key in ((1, "extra_0"), (2, "extra_1")):
        spec = json.dumps({"method": "mtp", "num_speculative_tokens": tokens})
        result = _plan(tmp_path, speculative_config=spec)
        assert [g.page_size_bytes for g in result.groups] == want[key]["pages"]
        assert result.num_blocks == GiB // want[key]["bytes_per_block"]
        per_request = sum(want[key]["blocks"])
        assert result.max_concurrency == pytest.approx(result.num_blocks / per_request)
    with pytest.raises(LayoutNotApplicable) as info:
        _plan(tmp_path, disable_hybrid_kv_cache_manager=True)
    assert want["unified"] in str(info.value)
