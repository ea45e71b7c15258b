"""Load-client overhead: kvbudget's client against a null server, side by side with peers.

Setup (issue 5): ``client_null_server.py`` (one token per SSE event, as fast as it can) pinned
to one core with ``taskset``, each client pinned to another core; ~32 prompt and 64 output
tokens; closed loop at 1, 64 and 256 streams. Per client and concurrency it reports completed
requests/s, streamed token events/s, client CPU seconds per request, the most streams in
flight, and the TTFT bias: client TTFT minus the server's own request-received-to-first-event
time for the same request (matched by the sha256 of the prompt), p50 and p99.

Clients:

* ``kvbudget``: the full ``kvbudget bench`` path (``kvbudget.load.run.run_load``: aiohttp
  client, SSE timing, one RequestRecord per request appended to JSONL);
* ``bare``: a minimal asyncio-socket client (no HTTP library, no records): the practical
  ceiling against this server;
* ``aiohttp-floor``: aiohttp post + ``readany`` until EOF and nothing else: the share of
  kvbudget's cost that is aiohttp's own (first byte timed on the first read, not the first
  token, so its TTFT bias is a lower bound);
* ``guidellm`` / ``aiperf``: peers, when their venvs exist (``--peer-venv NAME=PATH``).

Usage::

    .venv/bin/python bench/client_overhead.py --out bench/results/client_overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
PROMPT_TOKENS = 32
OUTPUT_TOKENS = 64


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ----------------------------------------------------------------------------- clients
async def _kvbudget_client(url: str, concurrency: int, num_requests: int) -> dict[str, Any]:
    from kvbudget.load.config import RunConfig
    from kvbudget.load.run import run_load
    from kvbudget.records import RequestRecord, read_jsonl

    out = Path(tempfile.mkdtemp(prefix="kvb-overhead-"))
    try:
        cfg = RunConfig(
            base_url=url,
            model="null",
            concurrency=concurrency,
            num_requests=num_requests,
            prompt_tokens=PROMPT_TOKENS,
            output_tokens=OUTPUT_TOKENS,
            timeout_s=120,
        )
        doc = await run_load(cfg, out_dir=out)
        # CPU of the load window only (t0 to the last request), as the runner measures it;
        # prompt generation and the identity probe happen before t0
        cpu = doc.accounting["client_cpu_s"]
        recs = read_jsonl(out / "requests.jsonl", RequestRecord).items
        s = doc.summary
        return {
            "ok": s["requests_ok"],
            "errors": s["requests_error"],
            "window_s": s["window_s"],
            "events": sum(len(r.chunk_times_s) for r in recs if r.status == "ok"),
            "cpu_s": cpu,
            "max_inflight": doc.accounting["max_inflight_seen"],
            "ttft": {r.prompt_sha256: r.ttft_s for r in recs if r.ttft_s is not None},
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


async def _bare_client(url: str, concurrency: int, num_requests: int) -> dict[str, Any]:
    """Minimal asyncio streams client: write the request, read until the chunked end."""
    from kvbudget.load.config import RunConfig
    from kvbudget.load.requests import synthetic_request

    host, port = url.removeprefix("http://").split(":")
    cfg = RunConfig(
        base_url=url, model="null", num_requests=num_requests, prompt_tokens=PROMPT_TOKENS
    )
    prompts = [synthetic_request(cfg, i).text() for i in range(num_requests)]
    next_i = 0
    ttft: dict[str, float] = {}
    events = 0
    inflight = 0
    max_inflight = 0

    async def worker() -> None:
        nonlocal next_i, events, inflight, max_inflight
        reader, writer = await asyncio.open_connection(host, int(port))
        while next_i < num_requests:
            prompt = prompts[next_i]
            next_i += 1
            body = json.dumps(
                {"model": "null", "prompt": prompt, "max_tokens": OUTPUT_TOKENS, "stream": True}
            ).encode()
            req = (
                f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode() + body
            inflight += 1
            max_inflight = max(max_inflight, inflight)
            t0 = time.perf_counter()
            writer.write(req)
            first = None
            buf = b""
            while True:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("server closed")
                if first is None and b'"text"' in data:
                    first = time.perf_counter()
                buf += data
                if buf.endswith(b"0\r\n\r\n"):
                    break
            events += buf.count(b'"text":')
            inflight -= 1
            assert first is not None
            ttft[hashlib.sha256(prompt.encode()).hexdigest()] = first - t0
        writer.close()

    cpu0 = _cpu_s()
    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    window = time.perf_counter() - t
    return {
        "ok": num_requests,
        "errors": 0,
        "window_s": window,
        "events": events,
        "cpu_s": _cpu_s() - cpu0,
        "max_inflight": max_inflight,
        "ttft": ttft,
    }


async def _aiohttp_floor_client(url: str, concurrency: int, num_requests: int) -> dict[str, Any]:
    """The aiohttp floor: one session, post + readany until EOF, nothing else (no SSE
    splitting, no JSON, no records): what any aiohttp-based client pays at least."""
    import aiohttp

    from kvbudget.load.config import RunConfig
    from kvbudget.load.requests import synthetic_request

    cfg = RunConfig(
        base_url=url, model="null", num_requests=num_requests, prompt_tokens=PROMPT_TOKENS
    )
    prompts = [synthetic_request(cfg, i).text() for i in range(num_requests)]
    next_i = 0
    ttft: dict[str, float] = {}
    inflight = 0
    max_inflight = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:

        async def worker() -> None:
            nonlocal next_i, inflight, max_inflight
            while next_i < num_requests:
                prompt = prompts[next_i]
                next_i += 1
                body = json.dumps(
                    {"model": "null", "prompt": prompt, "max_tokens": OUTPUT_TOKENS, "stream": True}
                ).encode()
                inflight += 1
                max_inflight = max(max_inflight, inflight)
                t0 = time.perf_counter()
                first = None
                async with session.post(url + "/v1/completions", data=body) as resp:
                    while True:
                        chunk = await resp.content.readany()
                        if not chunk:
                            break
                        if first is None:
                            first = time.perf_counter()
                inflight -= 1
                assert first is not None
                ttft[hashlib.sha256(prompt.encode()).hexdigest()] = first - t0

        cpu0 = _cpu_s()
        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        window = time.perf_counter() - t
    return {
        "ok": num_requests,
        "errors": 0,
        "window_s": window,
        "events": num_requests * OUTPUT_TOKENS,
        "cpu_s": _cpu_s() - cpu0,
        "max_inflight": max_inflight,
        "ttft": ttft,
    }


def client_main(kind: str, url: str, concurrency: int, num_requests: int, out: str) -> None:
    fn = {
        "kvbudget": _kvbudget_client,
        "bare": _bare_client,
        "aiohttp-floor": _aiohttp_floor_client,
    }[kind]
    result = asyncio.run(fn(url, concurrency, num_requests))
    Path(out).write_text(json.dumps(result))


# ----------------------------------------------------------------------------- orchestration
def _pin(core: int | None) -> list[str]:
    if core is None or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", str(core)]


def _http(url: str, method: str = "GET") -> Any:
    import urllib.request

    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _server_side(url: str) -> dict[str, Any]:
    """Throughput and streams in flight as the null server saw them (same for every client)."""
    stats = _http(url + "/stats")
    reqs = [v for v in stats["requests"].values() if len(v) == 3]
    if not reqs:
        return {
            "server_completed": 0,
            "server_window_s": 0.0,
            "max_inflight": stats["max_active"],
            "log": {},
        }
    start = min(v[0] for v in reqs)
    end = max(v[2] for v in reqs)
    return {
        "server_completed": len(reqs),
        "server_window_s": end - start,
        "max_inflight": stats["max_active"],
        "log": stats["requests"],
    }


def run_ours(kind: str, url: str, concurrency: int, n: int, core: int | None) -> dict[str, Any]:
    _http(url + "/reset_stats", "POST")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = fh.name
    cmd = [
        *_pin(core),
        sys.executable,
        __file__,
        "--client",
        kind,
        "--url",
        url,
        "--concurrency",
        str(concurrency),
        "--num-requests",
        str(n),
        "--result",
        out,
    ]
    cpu0 = _children_cpu_s()
    subprocess.run(cmd, check=True, timeout=900)
    proc_cpu = _children_cpu_s() - cpu0
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    server = _server_side(url)
    log = server.pop("log")
    bias = [
        ttft - (srv[1] - srv[0])
        for sha, ttft in res.pop("ttft").items()
        if (srv := log.get(sha)) is not None
    ]
    res.update(server)
    res["process_cpu_s"] = proc_cpu
    res["ttft_bias_ms_p50"] = float(np.percentile(bias, 50)) * 1e3 if bias else None
    res["ttft_bias_ms_p99"] = float(np.percentile(bias, 99)) * 1e3 if bias else None
    res["ttft_bias_matched"] = len(bias)
    return res


def run_peer(
    kind: str, venv: Path, url: str, concurrency: int, n: int, core: int | None, tokenizer: Path
) -> dict[str, Any]:
    """GuideLLM / AIPerf as in ../shared/reference/peers.md (the server measures them)."""
    _http(url + "/reset_stats", "POST")
    work = Path(tempfile.mkdtemp(prefix=f"peer-{kind}-"))
    if kind == "aiperf":
        cmd = [
            str(venv / "bin" / "aiperf"),
            "profile",
            "--model",
            "null",
            "--url",
            url,
            "--endpoint-type",
            "completions",
            "--streaming",
            "--concurrency",
            str(concurrency),
            "--request-count",
            str(n),
            "--tokenizer",
            str(tokenizer),
            "--synthetic-input-tokens-mean",
            str(PROMPT_TOKENS),
            "--output-tokens-mean",
            str(OUTPUT_TOKENS),
            "--no-server-metrics",
            "--no-gpu-telemetry",
            "--ui",
            "none",
            "--artifact-dir",
            str(work / "art"),
        ]
    else:
        cmd = [
            str(venv / "bin" / "guidellm"),
            "run",
            "--backend",
            f"kind=openai_http,target={url},model=mock,request_format=/v1/completions",
            "--profile",
            f"kind=concurrent,streams={concurrency}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
            "--tokenizer",
            f"kind=hf_auto,model={tokenizer}",
            "--constraint",
            f"kind=max_requests,count={n}",
            "--output",
            f"kind=json,path={work / 'g.json'}",
            "--disable-console-interactive",
        ]
    cpu0 = _children_cpu_s()
    t = time.perf_counter()
    proc = subprocess.run(
        [*_pin(core), *cmd], capture_output=True, text=True, timeout=900, check=False
    )
    wall = time.perf_counter() - t
    proc_cpu = _children_cpu_s() - cpu0
    shutil.rmtree(work, ignore_errors=True)
    for leftover in Path(tempfile.gettempdir()).glob("aiperf_mmap_*"):
        shutil.rmtree(leftover, ignore_errors=True)
    server = _server_side(url)
    server.pop("log")
    return {
        "ok": server["server_completed"],
        "errors": None,
        "window_s": server["server_window_s"],
        "events": server["server_completed"] * OUTPUT_TOKENS,
        "cpu_s": None,
        "process_cpu_s": proc_cpu,
        "process_wall_s": wall,
        "exit_code": proc.returncode,
        "stderr_tail": proc.stderr[-300:] if proc.returncode else "",
        **server,
    }


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    """Rates from the server's own window (the same yardstick for every client)."""
    w = res.get("server_window_s") or 0.0
    done = res.get("server_completed", 0)
    cpu = res.get("cpu_s")
    return {
        "requests_completed": done,
        "requests_per_s": done / w if w else None,
        "events_per_s": done * OUTPUT_TOKENS / w if w else None,
        "client_cpu_ms_per_request_run": cpu / max(1, done) * 1e3 if cpu is not None else None,
        "client_process_cpu_ms_per_request": res["process_cpu_s"] / max(1, done) * 1e3,
        "max_inflight": res["max_inflight"],
        "ttft_bias_ms_p50": res.get("ttft_bias_ms_p50"),
        "ttft_bias_ms_p99": res.get("ttft_bias_ms_p99"),
        "ttft_bias_matched": res.get("ttft_bias_matched"),
        **(
            {"exit_code": res["exit_code"], "stderr_tail": res["stderr_tail"]}
            if "exit_code" in res
            else {}
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="kvbudget load-client overhead benchmark")
    ap.add_argument(
        "--client", choices=["kvbudget", "bare", "aiohttp-floor"], help=argparse.SUPPRESS
    )
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument(
        "--num-requests",
        type=int,
        nargs="+",
        default=None,
        help="requests per concurrency (default 1500, 4000, 8000)",
    )
    ap.add_argument("--clients", nargs="+", default=["kvbudget", "bare"])
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--client-core", type=int, default=1)
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--peer-venv",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="run a peer (aiperf, guidellm) from this venv",
    )
    ap.add_argument(
        "--tokenizer",
        type=Path,
        default=Path("/tmp/peer-tokenizer"),
        help="local Hugging Face tokenizer directory for the peers",
    )
    args = ap.parse_args()
    if args.client:
        client_main(args.client, args.url, args.concurrency[0], args.num_requests[0], args.result)
        return
    counts = args.num_requests or [
        {1: 1500, 64: 4000, 256: 8000}.get(c, 40 * c) for c in args.concurrency
    ]
    s_core = None if args.no_pin else args.server_core
    c_core = None if args.no_pin else args.client_core
    server = subprocess.Popen(
        [
            *_pin(s_core),
            sys.executable,
            str(HERE / "client_null_server.py"),
            "--port",
            "0",
            "--tokens",
            str(OUTPUT_TOKENS),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    results: list[dict[str, Any]] = []
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        for conc, n in zip(args.concurrency, counts, strict=True):
            for kind in args.clients:
                res = summarize(run_ours(kind, url, conc, n, c_core))
                row = {"client": kind, "concurrency": conc, "num_requests": n, **res}
                results.append(row)
                print(json.dumps(row), flush=True)
            for spec in args.peer_venv:
                name, venv = spec.split("=", 1)
                peer_n = min(n, 2000)  # peers run at ~100 req/s here: keep their runs short
                res = summarize(
                    run_peer(name, Path(venv), url, conc, peer_n, c_core, args.tokenizer)
                )
                row = {"client": name, "concurrency": conc, "num_requests": peer_n, **res}
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    doc = {
        "what": "load-client overhead vs a null SSE server (one token per event)",
        "figure": "measured",
        "pinned": None if args.no_pin else {"server_core": s_core, "client_core": c_core},
        "cpus": os.cpu_count(),
        "loadavg_after": os.getloadavg(),
        "prompt_tokens": PROMPT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "rows": results,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
