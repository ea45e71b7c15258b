"""``kvbudget capacity``: the JSON answer's keys, the chart, and one-line refusals."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvbudget.cli.capacity import capacity
from kvbudget.errors import ConfigError

# a small, fast search: short requests, a few probes
SMALL = [
    "--timing-model",  # the roofline: these tests check the command's shape, not GPU tables
    "roofline",
    "--input-tokens",
    "128",
    "--output-tokens",
    "16",
    "--num-requests",
    "40",
    "--max-num-seqs",
    "8",
    "--rate-tolerance",
    "0.2",
    "--seeds",
    "2",
]


def test_json_names_the_answer_and_every_point(tmp_path: Path) -> None:
    chart = tmp_path / "curve.svg"
    result = CliRunner().invoke(
        capacity,
        [
            *SMALL,
            "--slo",
            "ttft_p95<200ms,tpot_p95<20ms,goodput>=0.9",
            "--json",
            "--chart-out",
            str(chart),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    for key in (
        "max_rate_per_s",
        "max_concurrency",
        "binding_constraint",
        "binding_constraint_concurrency",
        "max_rate_per_s_across_seeds",
        "max_concurrency_across_seeds",
        "rate_points",
        "concurrency_points",
    ):
        assert key in doc, key
    assert doc["figures"] == "simulated" and doc["timing_model"].startswith(
        ("roofline", "measured")
    )
    assert isinstance(doc["max_concurrency"], int)
    assert doc["max_rate_confirmed"] is True and doc["stopped"] is None
    assert doc["max_rate_per_s_across_seeds"]["seeds"] == [0, 1]
    point = doc["rate_points"][0]
    for key in ("load", "ttft_p95_s", "tpot_p95_s", "goodput_fraction", "stable", "meets_slo"):
        assert key in point, key
    # the answer is a load that was run and met the SLO; the binding one failed just above it
    passing = [p["load"] for p in doc["rate_points"] if p["meets_slo"]]
    assert doc["max_rate_per_s"] == max(passing)
    assert doc["binding_constraint"] in {
        "queue_growth",
        "kv_pool",
        "ttft_p95",
        "tpot_p95",
        "goodput",
    }
    text = chart.read_text()
    assert text.startswith("<svg") or "<svg" in text[:300]
    assert "simulated, roofline timing" in text
    # issue #32 item 5: the load axis says the rate was offered, and every tick label is a
    # plain number (no 4×10^1, no 1e-3, no "+4e1" offset)
    texts = [t.strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", text, re.S)]
    assert "offered Poisson rate (requests/s)" in texts
    assert not [t for t in texts if "×" in t or re.search(r"\de[+-]?\d", t) or t.startswith("+")]


def test_text_output_says_simulated_and_names_the_binding_constraint() -> None:
    result = CliRunner().invoke(capacity, [*SMALL, "--slo", "ttft_p95<200ms"])
    assert result.exit_code == 0, result.output
    assert "figures: simulated, timing model: " in result.output
    assert "binding:" in result.output and "max concurrency" in result.output


def _config_error(args: list[str]) -> ConfigError:
    result = CliRunner().invoke(capacity, args)
    assert isinstance(result.exception, ConfigError), (result.exception, result.output)
    assert "\n" not in str(result.exception)
    return result.exception


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--rate-tolerance", "0.9"], ["--rate-tolerance 0.9", "(0, 0.5]"]),
        (["--num-requests", "10"], ["--num-requests 10", "at least 20"]),
    ],
)
def test_bad_search_flags_are_refused(args: list[str], names: list[str]) -> None:
    text = str(_config_error([*args, "--slo", "ttft_p95<1s"]))
    for name in names:
        assert name in text


def test_scenario_events_are_refused(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("scale_out: [{at_s: 10}]\n")
    text = str(_config_error(["--scenario", str(scenario), "--slo", "ttft_p95<1s"]))
    assert "scale_out" in text and "remove it" in text


def test_malformed_slo_is_one_line_on_stderr_from_the_command_line() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget", "capacity", "--slo", "ttft_p95<1"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ConfigError: --slo 'ttft_p95<1'")
    assert "give s or ms" in lines[0]


def test_a_search_stopped_before_any_probe_says_so() -> None:
    from kvbudget.cli.capacity_render import render
    from kvbudget.maxload.point import LoadKind, Point
    from kvbudget.maxload.probe import Budget
    from kvbudget.maxload.run import find_capacity
    from kvbudget.maxload.slo import parse_slo

    budget = Budget(max_requests=10)

    def probe(kind: LoadKind, load: float, seed: int) -> Point:
        budget.charge(20)
        raise AssertionError("no probe fits a budget of 10 requests")

    slo = parse_slo("ttft_p95<1s")
    cap = find_capacity(probe, slo, saturation_concurrency=None, num_requests=20, seeds=(0,))
    doc: dict[str, object] = {
        "figures": "measured",
        "figures_label": "measured (test)",
        "engine": "test",
    }
    doc.update(cap.to_dict())
    assert doc["max_rate_per_s"] is None and doc["max_concurrency"] is None
    assert doc["stopped"] is not None and "request budget spent" in str(doc["stopped"])
    text = render(doc)
    assert "max rate         not found (the search stopped: request budget spent" in text
    assert "figures: measured (test)" in text
