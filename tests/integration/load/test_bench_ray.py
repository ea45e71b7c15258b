"""Load workers on a local Ray (``ray.init(num_cpus=2)``) against ``kvbudget serve``: one merged
records file, clock offsets, the accounting identity per worker, a worker lost mid-run."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbudget.load.config import RunConfig
from kvbudget.load.ray_workers import RayWorkerPool
from kvbudget.load.requests import synthetic_request
from kvbudget.load.run import run_load
from kvbudget.records import RequestRecord, read_jsonl
from tests.integration.engines import kvbudget_serve


@pytest.fixture(scope="module")
def serve_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with kvbudget_serve(log, "--model", "m", "--step-ms", "4") as server:
        yield server.base_url


def _cfg(url: str, **kw: Any) -> RunConfig:
    values: dict[str, Any] = {
        "base_url": url,
        "model": "m",
        "num_requests": 40,
        "concurrency": 2,
        "output_tokens": 20,
        "prompt_tokens": 8,
        "workers": 2,
    }
    values.update(kw)
    return RunConfig(**values)


@pytest.mark.timeout(240)
def test_ray_workers_merge_into_one_result(ray_local: Any, serve_url: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    doc = asyncio.run(run_load(_cfg(serve_url), out_dir=out, use_ray=True))
    records = read_jsonl(out / "requests.jsonl", RequestRecord).items
    assert sorted(r.request_id for r in records) == [f"r{i:07d}" for i in range(40)]
    assert all(r.worker == int(r.request_id[1:]) % 2 for r in records)
    a = doc.accounting
    assert a["transport"] == "ray" and a["workers_lost"] == 0
    assert a["sent"] == 40 and a["sent_equals_recorded"]
    for w in a["per_worker"]:
        mine = [r for r in records if r.worker == w["worker"]]
        # sent = ok + error + cancelled, worker by worker, against the merged file
        assert w["sent"] == w["ok"] + w["error"] + w["cancelled"] == len(mine) == 20
        # same host: CLOCK_MONOTONIC is system-wide, so the true offset is 0; the estimate
        # must be within half its round trip of it
        assert abs(w["clock_offset_s"]) <= w["clock_rtt_s"] / 2 + 1e-6
    assert doc.summary["requests_ok"] == 40


@pytest.mark.timeout(240)
def test_ray_open_loop_keeps_one_schedule(ray_local: Any, serve_url: str, tmp_path: Path) -> None:
    cfg = _cfg(serve_url, shape="constant", rate_per_s=40.0, num_requests=20, output_tokens=4)
    doc = asyncio.run(run_load(cfg, out_dir=tmp_path / "o", use_ray=True))
    records = read_jsonl(tmp_path / "o" / "requests.jsonl", RequestRecord).items
    assert doc.accounting["offered"] == doc.accounting["sent"] == 20
    for r in records:
        i = int(r.request_id[1:])
        assert r.worker == i % 2
        assert r.scheduled_s == pytest.approx(i / 40)
        # on the driver's timeline: no record sent before its schedule (offset corrected)
        assert r.sent_s is not None and r.sent_s >= r.scheduled_s - 0.005


@pytest.mark.timeout(240)
def test_lost_worker_is_reported_and_its_records_kept(
    ray_local: Any, serve_url: str, tmp_path: Path
) -> None:
    cfg = _cfg(serve_url, num_requests=60)
    planned = [synthetic_request(cfg, i) for i in range(60)]
    path = tmp_path / "requests.jsonl"
    pool = RayWorkerPool(cfg, planned, 2, 0, set(), path, None)
    killed: list[int] = []

    def kill_worker_1(num_lines: int) -> None:
        if num_lines >= 6 and not killed:
            ray_local.kill(pool.actors[1])
            killed.append(num_lines)

    async def go() -> list[Any]:
        await pool.start()
        pool.go(time.perf_counter() + 0.05)
        try:
            return await pool.collect(kill_worker_1)
        finally:
            pool.terminate()

    results = asyncio.run(go())
    assert killed, "the run ended before worker 1 could be killed"
    assert [r.worker for r in results] == [0]  # worker 0 finished its share
    acct = pool.accounting()
    assert acct["workers_lost"] == 1
    lost = acct["per_worker"][1]
    assert lost["lost"] and lost["sent"] is None
    records = read_jsonl(path, RequestRecord).items
    by_worker = {k: [r for r in records if r.worker == k] for k in (0, 1)}
    assert len(by_worker[0]) == 30 == results[0].sent  # i mod 2 == 0
    # worker 1's finished records, drained before it died, are kept and counted
    assert 1 <= len(by_worker[1]) < 30
    assert lost["recorded"] == len(by_worker[1])
    assert len({r.request_id for r in records}) == len(records)


@pytest.mark.timeout(240)
def test_bench_cli_ray_json(ray_local: Any, serve_url: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kvbudget.cli.bench import bench

    args = ["--base-url", serve_url, "--model", "m", "--num-requests", "10", "--concurrency", "2"]
    args += ["--output-tokens", "4", "--workers", "2", "--ray", "--out", str(tmp_path / "c")]
    out = CliRunner().invoke(bench, [*args, "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["accounting"]["transport"] == "ray"
    assert len(result["accounting"]["per_worker"]) == 2
    bad = CliRunner().invoke(
        bench,
        ["--base-url", serve_url, "--model", "m", "--ray-address", "auto", "--num-requests", "1"],
    )
    assert bad.exit_code != 0 and "--ray-address needs --ray" in str(bad.exception)
