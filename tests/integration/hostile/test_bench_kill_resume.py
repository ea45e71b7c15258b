"""bench under kill -9, a second run on the same --out, and a server that echoes the key."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.hostile.conftest import alive, children_of, env_with_tmp, lines, wait_for
from tests.integration.hostile.server import HostileServer

KEY = "sk-hostile-7f3a9c1e5b"


def _bench(url: str, out: Path | None, *extra: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "kvbudget",
        "bench",
        "--base-url",
        url,
        "--model",
        "m",
        "--no-progress",
        "--json",
        *extra,
    ]
    return cmd + (["--out", str(out)] if out is not None else [])


@pytest.mark.slow
def test_kill9_workers_die_and_resume_never_duplicates(tmp_path: Path) -> None:
    out = tmp_path / "out"
    tmp = tmp_path / "tmp"
    args = (
        "--workers",
        "3",
        "--concurrency",
        "6",
        "--num-requests",
        "60",
        "--output-tokens",
        "10",
        "--timeout",
        "60",
    )
    with HostileServer(token_delay_s=0.05) as server:
        proc = subprocess.Popen(
            _bench(server.url, out, *args),
            env=env_with_tmp(tmp),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_for(lambda: lines(out / "requests.jsonl") >= 6, 180)
        workers = children_of(proc.pid)
        assert workers, "bench --workers 3 started no worker processes"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert wait_for(lambda: not any(alive(w) for w in workers), 30), "workers outlived bench"
        posts = server.num_posts
        time.sleep(1.5)
        assert server.num_posts == posts, "requests were still sent after the kill"
        recorded = lines(out / "requests.jsonl")
        assert 6 <= recorded < 60
        rerun = subprocess.run(
            _bench(server.url, out, *args, "--resume"),
            env=env_with_tmp(tmp),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x]
    ids = [r["request_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 60  # every request once, none twice
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["requests_total"] == 60
    assert summary["accounting"]["duplicate_records_ignored"] == 0
    assert not list(tmp.glob("kvbudget-*")), list(tmp.iterdir())


@pytest.mark.slow
def test_kill9_without_out_leaves_no_temporary_directory(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    with HostileServer(token_delay_s=0.05) as server:
        proc = subprocess.Popen(
            _bench(server.url, None, "--num-requests", "200", "--output-tokens", "20"),
            env=env_with_tmp(tmp),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_for(lambda: server.num_posts >= 2, 120)
        assert list(tmp.glob("kvbudget-bench-*"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert wait_for(lambda: not list(tmp.glob("kvbudget-bench-*")), 60), list(tmp.iterdir())


@pytest.mark.slow
def test_second_run_on_one_out_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with HostileServer(token_delay_s=0.02) as server:
        first = subprocess.Popen(
            _bench(server.url, out, "--num-requests", "150", "--output-tokens", "10"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert wait_for(lambda: (out / "run.json").exists(), 120)
        second = subprocess.run(
            _bench(server.url, out, "--num-requests", "30", "--output-tokens", "10"),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        _first_out, first_err = first.communicate(timeout=600)
    assert second.returncode == 2, second.stderr
    err = second.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ConfigError: --out")
    assert f"pid {first.pid}" in err
    assert first.returncode == 0, first_err[-2000:]
    ids = [json.loads(x)["request_id"] for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 150


@pytest.mark.slow
def test_echoed_key_is_in_no_file_and_no_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with HostileServer() as server:
        run = subprocess.run(
            _bench(
                server.url,
                out,
                "--num-requests",
                "4",
                "--output-tokens",
                "4",
                "--api-key-env",
                "HOSTILE_KEY",
                "--keep-prompts",
            ),
            env=env_with_tmp(tmp_path / "tmp", HOSTILE_KEY=KEY),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    assert KEY not in run.stdout and KEY not in run.stderr
    assert "[redacted]" in run.stdout  # the echo was there, and was scrubbed
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_cancellation_counts_parsed_events_not_bytes(tmp_path: Path) -> None:
    """The server writes ``"text": "tok0 "`` (with a space): 10 of 10 requests are cancelled."""
    with HostileServer(token_delay_s=0.01) as server:
        run = subprocess.run(
            _bench(
                server.url,
                None,
                "--num-requests",
                "10",
                "--output-tokens",
                "12",
                "--cancel-after-tokens",
                "3",
            ),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["requests_cancelled"] == 10, doc
