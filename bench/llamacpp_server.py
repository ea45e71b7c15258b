"""Start and stop llama.cpp's `llama-server` on loopback; parse its KV log and /metrics.

Shared by the pytest fixtures (``tests/integration/llamacpp/conftest.py``) and the benchmark
(``bench/llamacpp_measure.py``); loaded by file path (bench/ is not a package).

The binary comes from `scripts/llama-server.sh` (built once per machine, cached under
``${XDG_CACHE_HOME:-~/.cache}/kvbudget/llama.cpp/<version>/``). Servers start on 127.0.0.1 with
a free port, ``--metrics`` and ``-lv 4`` (the KV allocation lines are only printed at trace
verbosity), and are stopped by PID, waiting for the process to exit (shutdown takes 1.5-2.5 s; a
new server must not race a dying one). Start, wait for ready, stop and the port pick are
``kvbudget.safety.servers``'; /metrics is parsed by ``kvbudget.load.prometheus``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbudget.load.prometheus import sample_values
from kvbudget.safety.servers import LocalServer, free_port

#: the calibration benchmarks' server: 4 slots of 2,048 tokens, one thread, f16 K and V
CALIBRATE_SERVER_ARGS = ["-c", "8192", "-np", "4", "-t", "1", "-ctk", "f16", "-ctv", "f16"]

REPO_ROOT = Path(__file__).resolve().parents[1]
LLAMACPP_PY_VERSION = os.environ.get("KVBUDGET_LLAMACPP_PY_VERSION", "0.3.36")
MODEL_BUILDER_REVISION = 1  # bump when scripts/tiny_gguf.py changes what it writes
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def llamacpp_cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "kvbudget" / "llama.cpp" / LLAMACPP_PY_VERSION


# One KV cache allocation, as `llama_kv_cache` logs it (src/llama-kv-cache.cpp):
# "llama_kv_cache: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), K (%s): %7.2f MiB, V (%s): %7.2f MiB"
KV_SIZE_RE = re.compile(
    r"llama_kv_cache: size = +(?P<total>[\d.]+) MiB \( *(?P<cells>\d+) cells, +(?P<layers>\d+) layers,"
    r" +(?P<seqs>\d+)/(?P<streams>\d+) seqs\), K \((?P<k_type>\w+)\): +(?P<k>[\d.]+) MiB,"
    r" V \((?P<v_type>\w+)\): +(?P<v>[\d.]+) MiB"
)
KV_BUFFER_RE = re.compile(r"llama_kv_cache: +(?P<dev>\S+) KV buffer size = +(?P<mib>[\d.]+) MiB")
ISWA_RE = re.compile(
    r"llama_kv_cache_iswa: creating +(?P<which>non-SWA|SWA) KV cache, size = (?P<cells>\d+) cells"
)
# MiniMax-M3's llama_kv_cache_msa (src/llama-kv-cache-msa.cpp): a "main" and an "indexer" cache
MSA_RE = re.compile(
    r"llama_kv_cache_msa: creating (?P<which>main|indexer) KV cache, size = (?P<cells>\d+) cells"
)


@dataclass(frozen=True)
class KvLogLine:
    """One `llama_kv_cache: size = ...` line, the strings exactly as printed."""

    total_mib: str
    cells: int  # per stream (kv_size)
    layers: int
    seqs: int  # n_seq_max
    streams: int  # n_stream
    k_type: str
    k_mib: str
    v_type: str
    v_mib: str
    buffer_mib: str  # the preceding "CPU KV buffer size" line
    cache: str  # "single"; "non-SWA" / "SWA" (interleaved sliding window); "main" / "indexer" (MSA)


def parse_kv_log(text: str) -> list[KvLogLine]:
    """All KV allocations in a server log, in order."""
    out: list[KvLogLine] = []
    buffer_mib = ""
    which = "single"
    for line in text.splitlines():
        if m := ISWA_RE.search(line) or MSA_RE.search(line):
            which = m["which"]
        elif m := KV_BUFFER_RE.search(line):
            buffer_mib = m["mib"]
        elif m := KV_SIZE_RE.search(line):
            out.append(
                KvLogLine(
                    total_mib=m["total"],
                    cells=int(m["cells"]),
                    layers=int(m["layers"]),
                    seqs=int(m["seqs"]),
                    streams=int(m["streams"]),
                    k_type=m["k_type"],
                    k_mib=m["k"],
                    v_type=m["v_type"],
                    v_mib=m["v"],
                    buffer_mib=buffer_mib,
                    cache=which,
                )
            )
    return out


@dataclass(kw_only=True)
class LlamaServer(LocalServer):
    """A running llama-server process (stop() by PID)."""

    binary: Path
    model: Path
    stop_timeout_s: float = STOP_TIMEOUT_S

    def kv_lines(self) -> list[KvLogLine]:
        return parse_kv_log(self.log_text())

    def metrics(self) -> dict[str, float]:
        return sample_values(self.metrics_text())

    def start(self) -> None:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(self.binary.parent) + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else ""
        )
        self.port = free_port()
        cmd = [
            str(self.binary),
            "-m",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--metrics",
            "-lv",
            "4",
            # the name /v1/models lists (bench and accept check --model against it)
            *(() if "--alias" in self.args else ("--alias", "tiny-llama")),
            *self.args,
        ]
        self.log_path.with_suffix(".cmd").write_text(" ".join(cmd) + "\n")
        self.launch(
            cmd,
            env=env,
            name="llama-server",
            timeout_s=STARTUP_TIMEOUT_S,
            poll_s=0.2,
            tail_lines=25,
        )


@dataclass(frozen=True)
class LlamaCpp:
    """The cached build: binary, version line, model paths."""

    binary: Path
    version: str  # first line of `llama-server --version`, e.g. "version: 0.5.0-dev (build 1, commit 0c1e570)"
    cache_dir: Path

    def model(self, arch: str = "llama", seed: int = 0, sliding_window_tokens: int = 128) -> Path:
        """Build (once, cached) the tiny random GGUF of `scripts/tiny_gguf.py`."""
        name = f"tiny-{arch}-seed{seed}"
        if arch == "gemma2":
            name += f"-swa{sliding_window_tokens}"
        path = self.cache_dir / "models" / f"{name}-r{MODEL_BUILDER_REVISION}.gguf"
        if not (path.is_file() and path.with_suffix(".config.json").is_file()):
            cmd = [
                sys.executable,
                str(REPO_ROOT / "scripts" / "tiny_gguf.py"),
                str(path),
                "--arch",
                arch,
                "--seed",
                str(seed),
                "--sliding-window",
                str(sliding_window_tokens),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    f"tiny_gguf.py failed ({done.returncode}): {done.stderr[-2000:]}"
                )
        return path


class NotBuiltError(RuntimeError):
    """The cached llama-server binary is missing or does not run."""


def find_llamacpp() -> LlamaCpp:
    """The cached build, or :class:`NotBuiltError` saying which command builds it."""
    cache = llamacpp_cache_dir()
    binary = cache / "bin" / "llama-server"
    if not binary.is_file():
        raise NotBuiltError(
            f"llama-server is not built: {binary} is missing. Run `bash scripts/llama-server.sh` "
            "(about 12-20 minutes on 2 cores, once per machine) and rerun."
        )
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0 or not lines:
        raise NotBuiltError(f"{binary} --version failed ({done.returncode}): {lines[-5:]}")
    version = next((ln for ln in lines if ln.startswith("version:")), lines[0])
    return LlamaCpp(binary=binary, version=version, cache_dir=cache)


def start_server(llamacpp: LlamaCpp, model: Path, log_path: Path, args: list[str]) -> LlamaServer:
    """Start a server and wait until /health answers 200 (stop it with ``.stop()``)."""
    server = LlamaServer(binary=llamacpp.binary, model=model, log_path=log_path, args=list(args))
    server.version = llamacpp.version
    server.start()
    return server


def random_token_ids(seed: int, num_tokens: int) -> list[int]:
    """Seeded token ids of ordinary Llama-3 vocabulary entries (below the specials at 128000+)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(1000, 100_000, size=num_tokens)]


def stream_completion(
    port: int, prompt: list[int], *, max_tokens: int = 4, timeout_s: float = 300.0
) -> dict[str, Any]:
    """One streamed ``/v1/completions`` with ``cache_prompt``: client TTFT, usage, timings.

    TTFT is measured on the client's monotonic clock from the request to the first text chunk.
    Raises ``RuntimeError`` on a non-200 answer or when no token streamed.
    """
    import http.client

    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "cache_prompt": True,
        "stream_options": {"include_usage": True},
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    sent = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft_s: float | None = None
    last: dict[str, Any] = {}
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        choices = event.get("choices") or []
        if ttft_s is None and choices and choices[0].get("text"):
            ttft_s = time.monotonic() - sent
        if event.get("usage"):
            last = event
    conn.close()
    if ttft_s is None:
        raise RuntimeError("no token streamed")
    return {"ttft_s": ttft_s, "usage": last.get("usage", {}), "timings": last.get("timings") or {}}
