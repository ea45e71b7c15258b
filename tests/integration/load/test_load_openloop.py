"""Open-loop shapes against the in-process ``serve``: offered vs sent, schedule lag, and the
bottleneck warning when the client cannot keep the schedule."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.load.config import RunConfig
from kvbudget.load.run import run_load
from kvbudget.records import RequestRecord, read_jsonl
from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine


def _run(tmp: Path, **cfg_kw: Any) -> tuple[Any, list[RequestRecord]]:
    async def go() -> Any:
        built = build_engine(ServeEngineOptions(model="m", num_gpu_blocks=1024, step_s=0.002))
        async with ServeApp(built.replica, model_name="m", max_model_len=8192) as app:
            cfg = RunConfig(base_url=app.base_url, model="m", prompt_tokens=8, **cfg_kw)
            return await run_load(cfg, out_dir=tmp)

    doc = asyncio.run(go())
    return doc, read_jsonl(tmp / "requests.jsonl", RequestRecord).items


@pytest.mark.timeout(60)
def test_constant_rate_schedule_and_lag(tmp_path: Path) -> None:
    doc, recs = _run(tmp_path, shape="constant", rate_per_s=40.0, num_requests=12, output_tokens=4)
    assert doc.accounting["offered"] == doc.accounting["sent"] == 12
    by_id = sorted(recs, key=lambda r: r.request_id)
    # constant rate 40/s: request i is scheduled at i / 40 s
    assert [r.scheduled_s for r in by_id] == pytest.approx([i / 40 for i in range(12)])
    for r in recs:
        assert r.schedule_lag_s is not None and r.schedule_lag_s >= 0
        assert r.sent_s == pytest.approx(r.scheduled_s + r.schedule_lag_s)


@pytest.mark.timeout(60)
def test_burst_beyond_max_inflight_shows_lag_and_warns(tmp_path: Path) -> None:
    # 12 requests at t=0, only 2 may be in flight: the later ones wait for free slots
    doc, recs = _run(tmp_path, shape="burst", num_requests=12, output_tokens=10, max_inflight=2)
    assert doc.accounting["sent"] == 12
    assert doc.accounting["max_inflight_seen"] == 2
    lags = sorted(r.schedule_lag_s or 0.0 for r in recs)
    # each request takes >= 10 steps of 2 ms: the last pair waits for 5 pairs before it
    assert lags[-1] >= 5 * 10 * 0.002
    assert any("fell behind its schedule" in w for w in doc.warnings)


@pytest.mark.timeout(60)
def test_poisson_and_ramp_are_accounted(tmp_path: Path) -> None:
    doc, recs = _run(
        tmp_path / "p", shape="poisson", rate_per_s=100.0, num_requests=15, output_tokens=3
    )
    assert len(recs) == doc.accounting["sent"] == 15
    gaps = np.diff(sorted(r.scheduled_s or 0.0 for r in recs))
    assert (gaps >= 0).all()
    doc2, recs2 = _run(
        tmp_path / "r",
        shape="ramp",
        ramp_stages=[(20.0, 0.3), (60.0, 0.3)],
        output_tokens=3,
        num_requests=1000,
    )
    assert len(recs2) == doc2.accounting["offered"] == doc2.accounting["sent"]
    assert all(0 <= (r.scheduled_s or 0.0) < 0.6 for r in recs2)


@pytest.mark.timeout(60)
def test_closed_loop_duration_stops_issuing(tmp_path: Path) -> None:
    doc, recs = _run(tmp_path, concurrency=3, duration_s=0.4, output_tokens=5)
    assert len(recs) == doc.accounting["sent"] > 3
    # nothing is sent after the duration (sends are checked against it before each request)
    assert max(r.sent_s or 0.0 for r in recs) < 0.4 + 0.05
