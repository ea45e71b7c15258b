"""Small HTTP servers for failure-path tests, run in a background thread.

``kvbudget.cli.main.main`` owns the foreground event loop (``asyncio.run``), so a server the
test talks to through the CLI runs in its own thread: kvbudget serve for a happy path, or
:class:`Fake`, whose answers the test chooses (so expected counts, statuses and messages are the
fake's definition, not the code under test's).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web


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
