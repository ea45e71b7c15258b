"""sim flags an unstable queue; a trace replay keeps its timestamps (issue 15, item 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.cli.main import main


def _sim(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    with pytest.raises(SystemExit) as info:
        main(["sim", "--json", *argv])
    out = capsys.readouterr().out
    assert info.value.code == 0, out
    doc: dict[str, object] = json.loads(out)
    return doc


def test_arrivals_above_the_service_rate_are_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _sim(capsys, ["--gpu", "L4", "--max-model-len", "4k", "--num-requests", "300",
                        "--rate", "200", "--input-tokens", "2048", "--output-tokens", "64"])  # fmt: skip
    queue = doc["queue"]
    assert isinstance(queue, dict) and queue["stable"] is False
    # the estimate offered / (1 + slope) against what the run actually completed per second
    completed_per_s = float(doc["requests_completed"]) / float(doc["simulated_s"])  # type: ignore[arg-type]
    assert queue["served_per_s"] == pytest.approx(completed_per_s, rel=0.25)
    assert any("unstable queue" in n for n in doc["notes"])  # type: ignore[union-attr]


def test_a_light_load_is_stable(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _sim(capsys, ["--num-requests", "200", "--rate", "2", "--input-tokens", "256",
                        "--output-tokens", "16"])  # fmt: skip
    assert doc["queue"] == {"stable": True}


def test_trace_replay_honours_its_timestamps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [{"timestamp": 1000 * i, "input_length": 64, "output_length": 4, "hash_ids": [i]}
             for i in range(5)]  # fmt: skip
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"workload:\n  trace: {{path: {trace}, block_size: 16}}\n", encoding="utf-8"
    )
    records = tmp_path / "r.jsonl"
    _sim(capsys, ["--scenario", str(scenario), "--records-out", str(records)])
    got = [json.loads(x) for x in records.read_text().splitlines()]
    # Mooncake timestamps are milliseconds: one request per second, not back to back
    assert sorted(r["scheduled_s"] for r in got) == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0])
    assert sorted(r["sent_s"] for r in got) == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0])


def test_trace_with_an_arrivals_block_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2}\n', encoding="utf-8")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"workload:\n  trace: {{path: {trace}}}\n  arrivals: {{kind: closed, concurrency: 1}}\n",
        encoding="utf-8",
    )
    with pytest.raises(SystemExit) as info:
        main(["sim", "--scenario", str(scenario)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "drop arrivals" in err, err
