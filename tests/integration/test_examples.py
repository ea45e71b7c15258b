"""Every file in ``examples/`` is run by a test, and the capabilities the README names are
reachable from a command (issue #32 item 6): the P/D scenario through ``kvbudget sim`` and the
sweep grid through ``kvbudget sweep``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.main import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TESTS = REPO / "tests"


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def test_every_example_is_run_by_a_test() -> None:
    sources = "\n".join(p.read_text() for p in TESTS.rglob("*.py"))
    sources += (REPO / "Makefile").read_text()  # make demo runs the acceptance demo
    unrun = [
        p.name
        for p in EXAMPLES.iterdir()
        if f"examples/{p.name}" not in sources and f'"examples" / "{p.name}"' not in sources
    ]
    assert not unrun, f"examples no test runs: {unrun}"


def test_pd_example_runs_both_sides_on_equal_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(
        ["sim", "--scenario", str(REPO / "examples" / "pd-disaggregation.yaml"), "--json"], capsys
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["figures"] == "simulated" and doc["mode"] == "disaggregation"
    pd, co = doc["disaggregated"], doc["colocated"]
    assert (pd["prefill_replicas"], pd["decode_replicas"], co["replicas"]) == (1, 1, 2)
    assert pd["requests_completed"] == co["requests_completed"] == 200
    # every prompt's KV crosses the link once: 200 x 4,096 tokens x 131,072 B (Llama-3.1-8B,
    # bf16: 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 B)
    assert pd["transfer_bytes"] == 200 * 4096 * 32 * 8 * 128 * 2 * 2
    # the link alone: 4,096 x 131,072 B at 5e10 B/s + 20 us = 10.76 ms a request (no queueing
    # is possible below 1 / 10.76 ms = 93 req/s per link, and the example sends 4 req/s)
    assert pd["transfer_s_mean"] == pytest.approx(4096 * 131072 / 5e10 + 2e-5, rel=1e-9)
    # decoders never wait behind a prefill: P/D's TPOT p99 is below co-location's
    assert pd["tpot_p99_s"] < co["tpot_p99_s"]


def test_pd_example_text_names_what_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(
        ["sim", "--scenario", str(REPO / "examples" / "pd-disaggregation.yaml")], capsys
    )
    assert code == 0, err
    assert "P/D disaggregation vs co-located" in out and "(simulated, measured (" in out


def test_pd_with_a_closed_loop_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (REPO / "examples" / "pd-disaggregation.yaml").read_text()
    bad = tmp_path / "pd.yaml"
    bad.write_text(text.replace("{kind: poisson, rate_per_s: 4}", "{kind: closed, concurrency: 4}"))
    code, out, err = _cli(["sim", "--scenario", str(bad)], capsys)
    assert code == 2 and out == ""
    assert err.startswith("ConfigError: disaggregation: a closed loop is not modelled")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.timeout(300)
def test_sweep_example_runs(
    ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "sweep"
    code, out, err = _cli(
        [
            "sweep",
            str(REPO / "examples" / "sweep-grid.yaml"),
            "--out",
            str(out_dir),
            "--workers",
            "2",
        ],
        capsys,
    )
    assert code == 0, err
    rows = [json.loads(x) for x in (out_dir / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 2 * 2  # gpu x kv_dtype x replicas x rate_per_s
    assert {r["status"] for r in rows} == {"simulated"}
    assert "figures: simulated" in out
