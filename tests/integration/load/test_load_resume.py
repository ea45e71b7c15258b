"""``kvbudget serve`` and ``kvbudget bench`` as subprocesses: kill -9 mid-run, then --resume;
and --workers N merging into one result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbudget.records import RequestRecord, read_jsonl
from tests.integration.engines import kvbudget_serve

KVBUDGET = [sys.executable, "-m", "kvbudget"]


@pytest.fixture(scope="module")
def serve_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with kvbudget_serve(log, "--model", "m", "--step-ms", "4") as server:
        yield server.base_url


def _bench(url: str, out: Path, *extra: str) -> list[str]:
    return [
        *KVBUDGET,
        "bench",
        "--base-url",
        url,
        "--model",
        "m",
        "--num-requests",
        "40",
        "--concurrency",
        "2",
        "--output-tokens",
        "20",
        "--prompt-tokens",
        "8",
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


@pytest.mark.timeout(120)
def test_kill_9_then_resume_completes_every_request_once(serve_url: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        _bench(serve_url, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    records_file = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if records_file.exists() and records_file.read_bytes().count(b"\n") >= 8:
                break
            if proc.poll() is not None:
                pytest.fail(
                    f"bench ended before it could be killed: {proc.stderr.read() if proc.stderr else ''}"
                )
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    first = read_jsonl(records_file, RequestRecord)
    n_first = len(first.items)
    assert 8 <= n_first < 40
    assert first.skipped_lines in ([], [n_first + 1])

    # resuming with different options is refused in one line
    bad = subprocess.run(
        [*_bench(serve_url, out, "--resume")[:-1], "--seed", "7", "--resume"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "seed" in bad.stderr and "Traceback" not in bad.stderr

    done = subprocess.run(
        [*_bench(serve_url, out, "--resume", "--json")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    records = read_jsonl(records_file, RequestRecord).items
    ids = [r.request_id for r in records]
    assert sorted(ids) == [f"r{i:07d}" for i in range(40)]  # every request exactly once
    assert {r.run_segment for r in records} == {0, 1}
    assert result["requests_total"] == 40
    assert result["requests_ok"] == 40
    assert result["accounting"]["sent"] == 40 - n_first
    # records kept from before the kill are untouched
    assert [r.request_id for r in records[:n_first]] == [r.request_id for r in first.items]


@pytest.mark.timeout(120)
def test_workers_merge_into_one_result(serve_url: str, tmp_path: Path) -> None:
    out = tmp_path / "w"
    cmd = _bench(serve_url, out, "--workers", "2", "--json")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    records = read_jsonl(out / "requests.jsonl", RequestRecord).items
    assert sorted(r.request_id for r in records) == [f"r{i:07d}" for i in range(40)]
    assert {r.worker for r in records} == {0, 1}
    # request i went to worker i mod 2
    assert all(r.worker == int(r.request_id[1:]) % 2 for r in records)
    assert result["accounting"]["workers"] == 2
    required = [
        "requests_total",
        "requests_ok",
        "requests_error",
        "requests_cancelled",
        "ttft_p50_s",
        "ttft_p99_s",
        "tpot_p50_s",
        "itl_p99_s",
        "output_tokens_per_s",
        "requests_per_s",
        "server_metrics",
    ]
    assert all(key in result for key in required)
    assert result["accounting"]["sent"] == 40
    assert result["requests_ok"] == 40


@pytest.mark.timeout(120)
def test_open_loop_workers_keep_one_schedule(serve_url: str, tmp_path: Path) -> None:
    out = tmp_path / "o"
    cmd = [
        *KVBUDGET,
        "bench",
        "--base-url",
        serve_url,
        "--model",
        "m",
        "--arrival",
        "constant",
        "--rate",
        "40",
        "--num-requests",
        "20",
        "--output-tokens",
        "4",
        "--prompt-tokens",
        "8",
        "--workers",
        "2",
        "--out",
        str(out),
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    records = read_jsonl(out / "requests.jsonl", RequestRecord).items
    assert result["accounting"]["offered"] == result["accounting"]["sent"] == 20
    by_index = {int(r.request_id[1:]): r for r in records}
    assert sorted(by_index) == list(range(20))
    for i, r in by_index.items():
        assert r.worker == i % 2
        # one timeline for both processes: request i is scheduled at i / 40 s
        assert r.scheduled_s == pytest.approx(i / 40)
        assert r.sent_s is not None and r.sent_s >= r.scheduled_s - 1e-6
