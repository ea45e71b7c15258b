"""``kvbudget sweep --ray-address``: joining a Ray cluster that another process started.

The other sweep tests use the session's in-process Ray. Here a head node is started the way an
operator starts one (``ray start --head``, in its own process group, with its own ports and
temporary directory), and ``kvbudget sweep`` runs in a fresh process that must join it: with an
address, ``ray.init`` connects or fails and never starts a Ray of its own, so rows simulated by
Ray workers prove the sweep ran on that cluster. The head is stopped by its process group only
(``ray stop`` would stop every Ray on the machine).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kvbudget.safety.servers import free_port

GRID = {
    "base": {
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "max_model_len": 4096,
        "workload": {
            "num_requests": 20,
            "input_tokens": {"kind": "fixed", "value": 256},
            "output_tokens": {"kind": "fixed", "value": 8},
        },
    },
    "grid": {"gpu": ["H100-SXM", "L4"], "rate_per_s": [5.0]},
    "slos": [{"name": "chat", "ttft_s": {"p99": 0.5}}],
}


def _wait_for_port(port: int, head: subprocess.Popen[bytes], deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if head.poll() is not None:
            raise AssertionError(f"ray start --head exited with {head.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the Ray head's GCS did not listen on {port} within {deadline_s} s")


@pytest.fixture
def ray_head() -> Iterator[str]:
    """A one-node Ray cluster (2 CPUs) started by ``ray start --head --block``; its address."""
    ray_cli = Path(sys.executable).parent / "ray"
    assert ray_cli.exists(), f"{ray_cli} missing: the test extra installs Ray"
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="kvbray", dir="/tmp")  # Ray's socket paths stay short
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [
            str(ray_cli),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        _wait_for_port(port, head, deadline_s=120)
        yield f"127.0.0.1:{port}"
    finally:
        try:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(timeout=90)  # the head drains its node first (tens of seconds)
        except ProcessLookupError:
            pass  # the head's group is already gone
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)


def _sweep(grid: Path, out: Path, address: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    args = ["sweep", str(grid), "--out", str(out), "--ray-address", address, "--json"]
    return subprocess.run(
        [sys.executable, "-m", "kvbudget", *args],
        capture_output=True,
        text=True,
        timeout=360,
        env={**clean, "RAY_USAGE_STATS_ENABLED": "0", **env},
    )


@pytest.mark.timeout(600)
def test_sweep_joins_a_running_cluster(ray_head: str, tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    # the head takes a token (Ray 2.60's default for `ray start`); a driver that sends none is
    # refused, and the one line says what to set
    refused = _sweep(grid, tmp_path / "refused", ray_head)
    assert refused.returncode == 2, refused.stdout[-500:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("TargetError: kvbudget sweep: cannot start or join the Ray cluster")
    assert "RAY_AUTH_MODE=token" in last
    out = tmp_path / "out"
    done = _sweep(grid, out, ray_head, RAY_AUTH_MODE="token")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {r["gpu"] for r in rows} == {"H100-SXM", "L4"}
    assert all(r["status"] == "simulated" and r["figures"] == "simulated" for r in rows)
    # simulated by the cluster's workers, neither here nor in the sweep's own process
    assert all(r["worker_pid"] not in (os.getpid(), 0) for r in rows)
    # no --workers: the sweep used the CPUs the cluster offers (the head's 2)
    assert json.loads(done.stdout)["num_workers"] == 2
