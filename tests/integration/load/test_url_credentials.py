"""Credentials in URLs (issue 30 item 8): a key in ``--base-url``'s userinfo or query is sent
but never shown or stored, and the value given to ``--api-key-env`` is never echoed.

Each case runs the real CLI (``python -m kvbudget``) and searches every byte it printed and
every file it wrote for the key.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

KVB = [sys.executable, "-m", "kvbudget"]
#: shorter than redact's 16-character threshold for unnamed query values, on purpose
KEY = "k3y-in-url"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVB, *args], capture_output=True, text=True, timeout=90, check=False)


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """An OpenAI-style server in a thread; yields ``host:port`` and the Authorization headers
    it saw."""
    seen: list[str] = []
    ready = threading.Event()
    state: dict[str, object] = {}

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "owned_by": "x"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"choices": [{"index": 0, "text": " t", "finish_reason": "length"}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def main() -> None:
        app = web.Application()
        app.add_routes([web.get("/v1/models", models), web.post("/v1/completions", completions)])
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        state["address"] = f"{host}:{port}"
        stop = asyncio.Event()
        state["stop"] = (asyncio.get_running_loop(), stop)
        ready.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield str(state["address"]), seen
    loop, stop = state["stop"]  # type: ignore[misc]
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


def _no_key_anywhere(proc: subprocess.CompletedProcess[str], out: Path | None) -> None:
    assert KEY not in proc.stdout, proc.stdout[-500:]
    assert KEY not in proc.stderr, proc.stderr[-500:]
    if out is not None:
        for f in out.rglob("*"):
            if f.is_file():
                assert KEY not in f.read_text(errors="replace"), f


@pytest.mark.timeout(120)
def test_key_in_userinfo_is_used_but_never_shown_or_stored(
    tmp_path: Path, server: tuple[str, list[str]]
) -> None:
    address, seen = server
    out = tmp_path / "run"
    proc = _run(
        "bench", "--base-url", f"http://user:{KEY}@{address}", "--model", "m",
        "--num-requests", "2", "--output-tokens", "1", "--no-progress", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # the key was sent (aiohttp turns userinfo into Basic auth) ...
    assert len(seen) == 2 and all(h.startswith("Basic ") for h in seen)
    # ... and is in no file and no output: summary.json, run.json, requests.jsonl, stdout
    assert (out / "summary.json").is_file() and (out / "run.json").is_file()
    _no_key_anywhere(proc, out)
    assert f"http://[redacted]@{address}" in (out / "run.json").read_text()
    # --resume still recognises the run (run.json keeps the URL without its credentials)
    again = _run(
        "bench", "--base-url", f"http://user:{KEY}@{address}", "--model", "m",
        "--num-requests", "2", "--output-tokens", "1", "--no-progress", "--out", str(out),
        "--resume",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    _no_key_anywhere(again, out)


def test_key_in_query_is_not_printed_on_stderr(tmp_path: Path) -> None:
    # nothing listens on port 1: the TargetError line quotes the URL
    proc = _run(
        "bench", "--base-url", f"http://127.0.0.1:1/v1?api_key={KEY}", "--model", "m",
        "--num-requests", "1", "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert proc.returncode == 2
    assert "127.0.0.1:1" in proc.stderr and "api_key=[redacted]" in proc.stderr
    _no_key_anywhere(proc, tmp_path)


@pytest.mark.parametrize("given", ["sk-live-0123456789abcdef", "KVB_SURELY_UNSET_VAR_30"])
def test_value_of_api_key_env_is_never_echoed(tmp_path: Path, given: str) -> None:
    proc = _run(
        "bench", "--base-url", "http://127.0.0.1:1", "--model", "m", "--num-requests", "1",
        "--api-key-env", given, "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ConfigError: --api-key-env")
    assert given not in proc.stderr and given not in proc.stdout
