"""The failure paths a new user hits first with ``kvbudget bench`` (issue 15, items 1-3 and 8).

Servers run in a background thread (``main`` owns the foreground event loop): kvbudget serve
for the happy path, and a tiny aiohttp app whose answers are chosen here, so every expected
count, status and message below is the fake server's definition, not the code under test's.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kvbudget.cli.main import main
from kvbudget.records import RequestRecord, read_jsonl


class ThreadServer:
    """Run an aiohttp app (or kvbudget serve) on 127.0.0.1 in its own thread."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        made = self._make()
        if isinstance(made, web.Application):
            runner = web.AppRunner(made)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()
        else:
            self.url = await made.start()
            self._ready.set()
            await self._stop.wait()
            await made.stop()

    def __enter__(self) -> ThreadServer:
        self._thread.start()
        assert self._ready.wait(30), "server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


class Fake:
    """/v1/models lists ``models``; POST /v1/completions answers by ``answer(n)``."""

    def __init__(self, models: list[str], answer: Callable[[int], tuple[int, str]]) -> None:
        self.models = models
        self.answer = answer
        self.posts = 0

    def app(self) -> web.Application:
        async def models(_: web.Request) -> web.Response:
            return web.json_response(
                {"object": "list", "data": [{"id": m, "owned_by": "fake"} for m in self.models]}
            )

        async def completions(request: web.Request) -> web.StreamResponse:
            self.posts += 1
            await request.read()
            status, text = self.answer(self.posts)
            if status != 200:
                return web.json_response({"error": {"message": text}}, status=status)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for piece in ("a", "b"):
                chunk = {"choices": [{"index": 0, "text": piece, "finish_reason": None}]}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            done = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
            await resp.write(b"data: " + json.dumps(done).encode() + b"\n\ndata: [DONE]\n\n")
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/completions", completions)
        return app


def _bench(
    capsys: pytest.CaptureFixture[str], url: str, out: Path, *extra: str
) -> tuple[int, str, str]:
    argv = ["bench", "--base-url", url, "--num-requests", "6", "--concurrency", "2"]
    argv += ["--input-tokens", "8", "--output-tokens", "2", "--timeout", "20", "--out", str(out)]
    with pytest.raises(SystemExit) as info:
        main([*argv, *extra])
    captured = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), captured.out, captured.err


@pytest.fixture
def serve_url() -> Iterator[str]:
    from kvbudget.serve.app import ServeApp
    from kvbudget.serve.build import ServeEngineOptions, build_engine

    def make() -> ServeApp:
        built = build_engine(ServeEngineOptions(model="tiny", step_s=0.001, num_gpu_blocks=256))
        return ServeApp(built.core, model_name="tiny", max_model_len=2048)

    with ThreadServer(make) as server:
        yield server.url


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_base_url_with_or_without_v1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, serve_url: str, suffix: str
) -> None:
    code, out, err = _bench(capsys, serve_url + suffix, tmp_path / "run", "--model", "tiny")
    assert code == 0, err
    assert f"POST {serve_url}/v1/completions" in " ".join(out.split())
    records = read_jsonl(tmp_path / "run" / "requests.jsonl", RequestRecord).items
    assert [r.status for r in records] == ["ok"] * 6
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["server"]["endpoint_url"] == f"{serve_url}/v1/completions"
    # item 8: every record of a run against kvbudget serve says simulated, like the summary
    assert summary["provenance"]["kind"] == "simulated"
    assert {r.source for r in records} == {"simulated"}


def test_model_left_out_takes_the_first_served(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, serve_url: str
) -> None:
    code, _out, err = _bench(capsys, serve_url, tmp_path / "run")
    assert code == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["server"]["model_sent"] == "tiny"


def test_unserved_model_is_refused_before_any_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake = Fake(["alpha", "beta"], lambda n: (200, ""))
    with ThreadServer(fake.app) as server:
        code, _out, err = _bench(capsys, server.url, tmp_path / "run", "--model", "gamma")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("TargetError: --model gamma:")
    assert "alpha, beta" in lines[0] and "nothing was sent" in lines[0]
    assert fake.posts == 0
    assert not (tmp_path / "run" / "requests.jsonl").exists()


def test_every_request_failing_exits_non_zero_with_the_servers_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake = Fake(["m"], lambda n: (500, "engine exploded (fake)"))
    with ThreadServer(fake.app) as server:
        code, _out, err = _bench(capsys, server.url + "/v1", tmp_path / "run", "--model", "m")
        url = server.url
    assert code == 4
    last = err.strip().splitlines()[-1]
    assert last.startswith("RunFailed: all 6 requests failed (HTTP 500 x6)"), last
    assert f"{url}/v1/completions" in last and "engine exploded (fake)" in last
    # nothing recorded is lost: the six records and the summary are on disk
    records = read_jsonl(tmp_path / "run" / "requests.jsonl", RequestRecord).items
    assert len(records) == 6 and all(r.http_status == 500 for r in records)
    assert (tmp_path / "run" / "summary.json").is_file()


def test_a_declared_error_fraction(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # requests 1, 3, 5 fail: half of six
    fake = Fake(["m"], lambda n: (429, "slow down") if n % 2 else (200, ""))
    with ThreadServer(fake.app) as server:
        code, _out, err = _bench(capsys, server.url, tmp_path / "a", "--model", "m")
        assert code == 0, err  # by default only a run in which every request failed
        code, _out, err = _bench(
            capsys, server.url, tmp_path / "b", "--model", "m", "--max-error-fraction", "0.25"
        )
    assert code == 4
    last = err.strip().splitlines()[-1]
    assert last.startswith("RunFailed: 3 of 6 requests failed (more than the allowed 25%)"), last
    assert "HTTP 429" in last and "slow down" in last
