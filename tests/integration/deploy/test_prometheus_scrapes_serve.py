"""A real Prometheus server loads kvbudget deploy's rule file, scrapes ``kvbudget serve`` and
fires the capacity alert under load; at idle it stays silent.

Everything on 127.0.0.1, in a temp dir, stopped by PID. ``kvbudget serve`` has a manual pool
with 2 running slots, so 8 concurrent requests leave 6 waiting (``vllm:num_requests_waiting``);
the demo plan's ``RequestsWaiting`` threshold is 1 per replica (a plan has no accepted load).
Bounded in time: every wait has a deadline. Needs Debian's prometheus (scripts/ensure-prometheus.sh);
without it the test fails.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from kvbudget.cli.deploy import deploy
from kvbudget.safety.servers import free_port, stop_process
from tests.integration.engines import kvbudget_serve

REPO_ROOT = Path(__file__).resolve().parents[3]
DEMO_PLAN = REPO_ROOT / "examples" / "acceptance-demo.yaml"
CAPACITY_ALERTS = {"RequestsWaiting", "KVCacheUsageHighWater", "KVCachePreemptions"}

pytestmark = pytest.mark.slow


@pytest.fixture
def serve_url(tmp_path: Path) -> Iterator[str]:
    args = ["--model", "m", "--num-gpu-blocks", "512", "--max-num-seqs", "2", "--step-ms", "20"]
    with kvbudget_serve(tmp_path / "serve.log", *args) as server:
        yield server.base_url


def _prometheus(tmp: Path, target: str, rules: Path) -> tuple[subprocess.Popen[Any], str]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: run scripts/ensure-prometheus.sh"
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "engine", "static_configs": [{"targets": [target]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=(tmp / "prometheus.log").open("w"),
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


def _wait(pred: Any, deadline_s: float, what: str) -> Any:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            value = pred()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {deadline_s:g} s waiting for {what}")


def _firing(prom: str) -> set[str]:
    alerts = httpx.get(f"{prom}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def test_capacity_alert_fires_under_load_and_not_at_idle(tmp_path: Path, serve_url: str) -> None:
    out = tmp_path / "deploy"
    result = CliRunner().invoke(
        deploy,
        [str(DEMO_PLAN), "--out", str(out), "--service", "svc", "--metric-selector", 'model_name="m"',
         "--alert-for", "3s", "--rate-window", "15s"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    prom_proc, prom = _prometheus(
        tmp_path, serve_url.removeprefix("http://"), out / "alerts.rules.yaml"
    )
    stop = threading.Event()
    try:
        _wait(
            lambda: httpx.get(f"{prom}/-/ready", timeout=2).status_code == 200,
            60,
            "Prometheus ready",
        )

        def target_up() -> bool:
            data = httpx.get(f"{prom}/api/v1/query", params={"query": "up"}, timeout=5).json()
            return any(r["value"][1] == "1" for r in data["data"]["result"])

        _wait(target_up, 60, "kvbudget serve scraped (up == 1)")
        rules = httpx.get(f"{prom}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert {g["name"] for g in rules} >= {"svc.capacity", "svc.performance"}
        # idle: well past 'for' (3 s) at a 1 s evaluation interval, nothing fires
        time.sleep(10)
        assert not _firing(prom) & CAPACITY_ALERTS

        def load() -> None:
            with httpx.Client(base_url=serve_url, timeout=60) as client:
                while not stop.is_set():
                    client.post(
                        "/v1/completions",
                        json={"model": "m", "prompt": "a b c d e f g h", "max_tokens": 60},
                    )

        workers = [threading.Thread(target=load, daemon=True) for _ in range(8)]
        for w in workers:
            w.start()
        firing = _wait(lambda: _firing(prom) & {"RequestsWaiting"}, 90, "RequestsWaiting firing")
        assert firing == {"RequestsWaiting"}
        waiting = httpx.get(
            f"{prom}/api/v1/query",
            params={"query": 'vllm:num_requests_waiting{model_name="m"}'},
            timeout=5,
        ).json()["data"]["result"]
        assert float(waiting[0]["value"][1]) > 0
    finally:
        stop.set()
        stop_process(prom_proc, 20.0)
