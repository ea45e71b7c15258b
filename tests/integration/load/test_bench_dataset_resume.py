"""``kvbudget bench --resume`` with a dataset or a trace (issue 31): the file's sha256 is recorded
when the run starts and a resume re-reads the file and refuses a changed one, in one line naming
the field, both hashes and the fix, before any request is sent.

The expected hashes are ``hashlib.sha256`` of the bytes this test writes (an independent
source); the server is the recording fake of ``test_bench_workloads``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.main import main
from kvbudget.records import RequestRecord, read_jsonl
from tests.integration.http_fakes import ThreadServer
from tests.integration.load.test_bench_workloads import Recorder

PROMPTS = ["one two three", "four five", "six seven eight nine"]


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, str]]:
    rec = Recorder()
    with ThreadServer(rec.app) as server:
        yield rec, server.url


def _argv(url: str, out: Path, data: Path, *extra: str) -> list[str]:
    return [
        "bench", "--base-url", url, "--timeout", "20", "--out", str(out), "--json",
        "--dataset-name", "custom", "--dataset-path", str(data), "--disable-shuffle",
        "--num-requests", "3", "--output-tokens", "2", *extra,
    ]  # fmt: skip


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


def _write(path: Path, prompts: list[str]) -> bytes:
    data = "".join(json.dumps({"prompt": p}) + "\n" for p in prompts).encode()
    path.write_bytes(data)
    return data


@pytest.mark.timeout(60)
def test_resume_sends_the_rest_of_the_same_dataset_and_refuses_a_changed_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    data, out = tmp_path / "prompts.jsonl", tmp_path / "run"
    original = hashlib.sha256(_write(data, PROMPTS)).hexdigest()
    code, stdout, err = _run(capsys, _argv(url, out, data))
    assert code == 0, err
    # recorded at the start in run.json, and in the result's config and prompts
    run_cfg = json.loads((out / "run.json").read_text())["config"]
    assert run_cfg["workload"]["dataset_sha256"] == original
    doc: dict[str, Any] = json.loads(stdout)
    assert doc["prompts"]["dataset_sha256"] == original

    # a run killed after its first request: keep only that record, then resume
    lines = (out / "requests.jsonl").read_text().splitlines(keepends=True)
    first = next(x for x in lines if '"r0000000"' in x)
    (out / "requests.jsonl").write_text(first)
    fake.bodies.clear()

    # the file changed: refused in one line, nothing sent
    changed = hashlib.sha256(_write(data, [*PROMPTS, "ten"])).hexdigest()
    code, _, err = _run(capsys, _argv(url, out, data, "--resume"))
    lines_err = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines_err) == 1, err
    line = lines_err[0]
    assert line.startswith("ConfigError: --resume: --dataset-path")
    assert f"dataset_sha256 {original} recorded, {changed} now" in line
    assert "put the original file back" in line
    assert fake.bodies == []

    # the original content back (rewritten: same bytes, same hash): the rest is sent
    _write(data, PROMPTS)
    code, stdout, err = _run(capsys, _argv(url, out, data, "--resume"))
    assert code == 0, err
    assert [b["prompt"] for b in fake.bodies] == PROMPTS[1:]  # r1, r2 in file order
    recs = read_jsonl(out / "requests.jsonl", RequestRecord).items
    assert sorted(r.request_id for r in recs) == ["r0000000", "r0000001", "r0000002"]
    assert json.loads(stdout)["accounting"]["sent"] == 2


@pytest.mark.timeout(60)
def test_resume_of_a_run_without_a_recorded_hash_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    data, out = tmp_path / "prompts.jsonl", tmp_path / "run"
    _write(data, PROMPTS)
    code, _, err = _run(capsys, _argv(url, out, data))
    assert code == 0, err
    # as an older kvbudget wrote it: no dataset_sha256
    run = json.loads((out / "run.json").read_text())
    del run["config"]["workload"]["dataset_sha256"]
    (out / "run.json").write_text(json.dumps(run))
    fake.bodies.clear()
    code, _, err = _run(capsys, _argv(url, out, data, "--resume"))
    lines_err = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines_err) == 1, err
    assert "recorded no dataset_sha256" in lines_err[0] and "another --out" in lines_err[0]
    assert fake.bodies == []


# a Mooncake trace (ms timestamps): three requests 50 ms apart
TRACE = [
    {"timestamp": 1000 + 50 * i, "input_length": 3 + i, "output_length": 2, "hash_ids": []}
    for i in range(3)
]


def _write_trace(path: Path, lines: list[dict[str, Any]]) -> bytes:
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    path.write_bytes(data)
    return data


def _trace_argv(url: str, out: Path, trace: Path, *extra: str) -> list[str]:
    return [
        "bench", "--base-url", url, "--timeout", "20", "--out", str(out), "--json",
        "--trace", str(trace), *extra,
    ]  # fmt: skip


@pytest.mark.timeout(60)
def test_resume_of_a_trace_refuses_a_changed_trace_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    trace, out = tmp_path / "trace.jsonl", tmp_path / "run"
    original = hashlib.sha256(_write_trace(trace, TRACE)).hexdigest()
    code, _, err = _run(capsys, _trace_argv(url, out, trace))
    assert code == 0, err
    run_cfg = json.loads((out / "run.json").read_text())["config"]
    assert run_cfg["workload"]["trace_sha256"] == original
    assert run_cfg["workload"]["dataset_sha256"] is None

    lines = (out / "requests.jsonl").read_text().splitlines(keepends=True)
    (out / "requests.jsonl").write_text(lines[0])  # killed after one request
    fake.bodies.clear()

    longer = [*TRACE[:2], {**TRACE[2], "output_length": 4}]  # one field of one line changed
    changed = hashlib.sha256(_write_trace(trace, longer)).hexdigest()
    code, _, err = _run(capsys, _trace_argv(url, out, trace, "--resume"))
    lines_err = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines_err) == 1, err
    assert lines_err[0] == (
        f"ConfigError: --resume: --trace {trace} is not the file the run in {out} started with "
        f"(trace_sha256 {original} recorded, {changed} now); put the original file back, or "
        "start a new run with another --out"
    )
    assert fake.bodies == []

    _write_trace(trace, TRACE)  # the original bytes back: the two missing requests are sent
    code, stdout, err = _run(capsys, _trace_argv(url, out, trace, "--resume"))
    assert code == 0, err
    assert len(fake.bodies) == 2
    assert json.loads(stdout)["accounting"]["sent"] == 2
    recs = read_jsonl(out / "requests.jsonl", RequestRecord).items
    assert len({r.request_id for r in recs}) == 3


@pytest.mark.timeout(60)
def test_resume_of_a_trace_run_without_a_recorded_hash_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    trace, out = tmp_path / "trace.jsonl", tmp_path / "run"
    _write_trace(trace, TRACE)
    code, _, err = _run(capsys, _trace_argv(url, out, trace))
    assert code == 0, err
    run = json.loads((out / "run.json").read_text())
    del run["config"]["workload"]["trace_sha256"]  # as an older kvbudget wrote it
    (out / "run.json").write_text(json.dumps(run))
    fake.bodies.clear()
    code, _, err = _run(capsys, _trace_argv(url, out, trace, "--resume"))
    lines_err = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines_err) == 1, err
    assert "recorded no trace_sha256 for --trace" in lines_err[0]
    assert "another --out" in lines_err[0]
    assert fake.bodies == []
