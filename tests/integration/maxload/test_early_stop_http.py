"""A probe stops as soon as its SLO is clearly broken, against a fake engine whose TTFT the
test sets (so when it must stop is hand arithmetic, not the code under test's).

The fake streams every completion's first token ``delay_s`` after the request arrived (then a
second token and the end). ``ttft_p95<100ms`` over 20 planned requests is settled by 2 requests
over 100 ms (``20 - floor(19 * 0.95) = 2``, kvbudget.maxload.early_stop).

* Closed loop, concurrency 2, every TTFT 0.3 s: requests 1 and 2 go out together; the first to
  finish (1 over) frees its user, who sends request 3; the second to finish (2 over) stops the
  probe with request 3 in flight, whichever order they finish in (request 3 cannot finish first:
  it was sent 0.3 s later). So 3 sent: 2 ok, 1 cancelled, 17 never sent.
* Planned open loop, one request every 0.4 s, every TTFT 1.0 s: request 0 finishes at 1.0 s,
  request 1 at 1.4 s, which stops the run; by then requests at 0, 0.4, 0.8 and 1.2 s were sent
  and the next (1.6 s) was not: 4 sent, 2 ok, 2 cancelled, 16 not sent (0.2 s margins).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from kvbudget.accept.targets.http import HttpTarget
from kvbudget.cli.main import run_async
from kvbudget.load.config import RunConfig
from kvbudget.load.run import run_load
from kvbudget.load.run_dir import REQUESTS_FILE
from kvbudget.maxload.early_stop import EarlyStop
from kvbudget.maxload.probe import Budget, EarlyStopProbe
from kvbudget.maxload.slo import parse_slo
from kvbudget.records import RequestRecord, read_jsonl
from kvbudget.workload.request import PlannedRequest
from tests.integration.http_fakes import ThreadServer

SLO = "ttft_p95<100ms"
NUM = 20


class SlowFirstToken:
    """/v1/models serves ``fake``; each completion's first token comes ``delay_s`` late."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.posts = 0
        self.disconnects = 0

    def app(self) -> web.Application:
        async def models(_: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": "fake"}]})

        async def completions(request: web.Request) -> web.StreamResponse:
            self.posts += 1
            await request.read()
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            try:
                await asyncio.sleep(self.delay_s)
                for piece in ("a", "b"):
                    chunk = {"choices": [{"index": 0, "text": piece, "finish_reason": None}]}
                    await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                done = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
                await resp.write(b"data: " + json.dumps(done).encode() + b"\n\ndata: [DONE]\n\n")
                await resp.write_eof()
            except (ConnectionResetError, asyncio.CancelledError):
                self.disconnects += 1
                raise
            return resp

        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/completions", completions)
        return app


def test_a_closed_loop_probe_stops_at_the_second_request_over() -> None:
    fake = SlowFirstToken(0.3)
    with ThreadServer(fake.app) as server:
        target = HttpTarget(base_url=server.url, model="fake", run_async=run_async)
        budget = Budget(max_requests=100)
        workload = {
            "input_tokens": {"kind": "fixed", "value": 8},
            "output_tokens": {"kind": "fixed", "value": 2},
        }
        probe = EarlyStopProbe(target, workload, parse_slo(SLO), num_requests=NUM, budget=budget)
        point = probe("concurrency", 2, 0)
    assert point.stopped_early == f"ttft_p95: 2 of {NUM} planned requests over 100 ms"
    assert point.num_sent == 3 and point.num_requests == NUM
    assert point.num_ok == 2
    assert not point.meets_slo and point.failing[0] == "ttft_p95"
    assert budget.num_requests == 3  # charged 20, refunded the 17 never sent


def test_an_open_loop_run_stops_and_accounts_every_request(tmp_path: Path) -> None:
    fake = SlowFirstToken(1.0)
    planned = [
        PlannedRequest(
            request_id=f"r{i}", arrival_s=0.4 * i, prompt_token_ids=(5, 6, 7, 8), output_tokens=2
        )
        for i in range(NUM)
    ]
    stop = EarlyStop(parse_slo(SLO), NUM)
    with ThreadServer(fake.app) as server:
        cfg = RunConfig(
            base_url=server.url, model="fake", shape="planned", num_requests=NUM, timeout_s=30
        )
        doc = asyncio.run(run_load(cfg, out_dir=tmp_path, planned=planned, stop_when=stop))
    records = read_jsonl(tmp_path / REQUESTS_FILE, RequestRecord).items
    acc = doc.accounting
    assert acc["stopped_early"] == f"ttft_p95: 2 of {NUM} planned requests over 100 ms"
    assert (acc["offered"], acc["sent"], acc["not_sent"]) == (NUM, 4, 16)
    assert acc["sent_equals_recorded"] is True
    by_id = {r.request_id: r for r in records}
    assert sorted(by_id) == ["r0", "r1", "r2", "r3"]
    assert [by_id[i].status for i in ("r0", "r1")] == ["ok", "ok"]
    for rid in ("r2", "r3"):
        assert by_id[rid].status == "cancelled" and by_id[rid].error_kind == "cancelled"
        assert (by_id[rid].error_excerpt or "").startswith("stopped early: ttft_p95")
    assert any("stopped early" in w for w in doc.warnings)


def test_a_probe_that_meets_its_slo_sends_everything() -> None:
    fake = SlowFirstToken(0.0)
    with ThreadServer(fake.app) as server:
        target = HttpTarget(base_url=server.url, model="fake", run_async=run_async)
        workload = {
            "input_tokens": {"kind": "fixed", "value": 8},
            "output_tokens": {"kind": "fixed", "value": 2},
        }
        probe = EarlyStopProbe(target, workload, parse_slo("ttft_p95<5s"), num_requests=NUM)
        point = probe("concurrency", 2, 0)
    assert point.stopped_early is None and point.num_sent == NUM and point.meets_slo


def test_stop_when_needs_one_in_process_worker() -> None:
    cfg = RunConfig(base_url="http://127.0.0.1:9", num_requests=2, workers=2)
    with pytest.raises(ValueError, match="one in-process worker"):
        asyncio.run(run_load(cfg, stop_when=EarlyStop(parse_slo(SLO), 2)))
