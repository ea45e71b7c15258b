"""Servers the integration tests start: the real engines' launchers (``bench/<name>.py`` loaded
once by file path, bench/ is not a package; the cached build found or the test FAILS with the
command that builds it: a real-engine test never skips), a factory that stops what it started,
``kvbudget serve`` on a free port, and ``kvbudget bench`` / ``kvbudget accept`` against a running
server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from kvbudget.safety.servers import LocalServer, free_port
from tests.repo_scripts import load_script

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_bench(stem: str) -> ModuleType:
    """``bench/<stem>.py`` as module ``kvbudget_bench_<stem>`` (loaded once per process)."""
    return load_script(f"bench/{stem}.py")


def find_or_fail(launcher: ModuleType, find: Callable[[], Any]) -> Any:
    """The cached engine build, or the test fails with the launcher's NotBuiltError message."""
    try:
        return find()
    except launcher.NotBuiltError as exc:
        pytest.fail(str(exc), pytrace=False)


@contextmanager
def server_factory(logs: Path, stem: str, make: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``start(*a, **kw)``: ``make(log_path, *a, **kw)`` then ``.start()``; on exit every server
    made here is stopped (a failed start included)."""
    servers: list[Any] = []

    def start(*args: Any, **kw: Any) -> Any:
        server = make(logs / f"{stem}-{len(servers)}.log", *args, **kw)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@contextmanager
def kvbudget_serve(log_path: Path, *args: str) -> Iterator[LocalServer]:
    """``kvbudget serve ARGS`` on a free loopback port, ready (``/health`` 200 within 60 s);
    stopped by PID on exit."""
    server = LocalServer(log_path=log_path, args=list(args))
    server.port = free_port()
    cmd = [sys.executable, "-m", "kvbudget", "serve", "--port", str(server.port), *args]
    with server:
        server.launch(cmd, env=os.environ, name="kvbudget serve", timeout_s=60.0, poll_s=0.2)
        yield server


def run_kvbudget_bench(server: Any, model: str, out_dir: Path, *args: str) -> dict[str, Any]:
    """``kvbudget bench --json`` against ``server`` (its /metrics scraped every 0.25 s), into
    ``out_dir``; the printed result, or the test fails with bench's stderr."""
    cmd = [sys.executable, "-m", "kvbudget", "bench", "--base-url", server.base_url]
    cmd += ["--model", model, "--metrics-url", server.base_url + "/metrics"]
    cmd += ["--scrape-interval", "0.25", "--out", str(out_dir), "--json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (
        f"kvbudget bench failed ({done.returncode}):\n{done.stderr[-3000:]}"
    )
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def run_kvbudget_accept(
    plan: dict[str, Any], out: Path, *, timeout_s: float = 900.0
) -> dict[str, Any]:
    """``kvbudget accept`` of ``plan`` (written beside ``out`` as YAML) into ``out``; its
    report.json, or the test fails with accept's output."""
    plan_path = out.with_suffix(".yaml")
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    cmd = [sys.executable, "-m", "kvbudget", "accept", str(plan_path), "--out", str(out)]
    done = subprocess.run(
        [*cmd, "--quiet"], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert done.returncode == 0, (
        f"accept failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    )
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report
