"""docs/how-much-can-it-hold.md shows what ``kvbudget capacity`` prints from the kept raw result
(bench/results/capacity_example.json), and its sentences quote that result's answers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kvbudget.cli.capacity_render import render

REPO = Path(__file__).resolve().parents[3]


def _doc() -> str:
    return (REPO / "docs" / "how-much-can-it-hold.md").read_text(encoding="utf-8")


def _raw() -> dict[str, object]:
    data: dict[str, object] = json.loads(
        (REPO / "bench" / "results" / "capacity_example.json").read_text(encoding="utf-8")
    )
    return data


def test_pasted_output_is_the_raw_result_rendered() -> None:
    m = re.search(
        r"<!-- capacity-example:begin -->\n```\n(.*?)\n```\n<!-- capacity-example:end -->",
        _doc(),
        re.DOTALL,
    )
    assert m is not None
    assert m.group(1) == render(_raw())


def test_the_page_quotes_the_raw_answers_and_says_simulated() -> None:
    raw = _raw()
    text = _doc()
    assert raw["figures"] == "simulated" and raw["timing_model"] == "roofline"
    assert "simulated" in text and "roofline" in text
    rate = raw["max_rate_per_s"]
    assert isinstance(rate, float)
    assert f"**Max rate: {rate:.3g} requests/s, bound by {raw['binding_constraint']}.**" in text
    assert (
        f"**Max concurrency: {raw['max_concurrency']}, bound by TTFT p95.**" in text
        and raw["binding_constraint_concurrency"] == "ttft_p95"
    )
    assert (REPO / "docs" / "img" / "capacity-llama-3.1-8b-h100.svg").is_file()


def _vllm_raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (REPO / "bench" / "results" / "capacity_vllm_cpu_example.json").read_text(encoding="utf-8")
    )
    return data


def test_the_vllm_example_is_the_kept_measurement_rendered() -> None:
    raw = _vllm_raw()
    m = re.search(
        r"<!-- capacity-vllm-example:begin -->\n```\n(.*?)\n```\n<!-- capacity-vllm-example:end -->",
        _doc(),
        re.DOTALL,
    )
    assert m is not None
    assert m.group(1) == render(raw["result"])


def test_the_vllm_example_says_measured_engine_version_and_this_cpu() -> None:
    raw = _vllm_raw()
    result = raw["result"]
    text = _doc()
    assert result["figures"] == "measured" and result["engine"] == "vllm"
    assert result["engine_version"] == raw["engine_version"] == "0.32.0"
    section = text[text.index("## On vLLM's CPU build (measured)") :]
    assert "measured" in section and f"vLLM {raw['engine_version']}" in section
    assert f"`{raw['cpu_model_name']}`" in section and f"{raw['cpu_count']} vCPUs" in section
    assert f"load average {raw['load_average_1m_before']:g}" in section
    for point in result["rate_points"] + result["concurrency_points"]:
        assert "num_waiting_max" in point and "kv_usage_max" in point  # /metrics at each step
