"""Start and stop llama.cpp's `llama-server` on loopback; parse its KV log and /metrics.

Shared by the pytest fixtures (``tests/integration/llamacpp/conftest.py``) and the benchmark
(``bench/llamacpp_measure.py``); loaded by file path (bench/ is not a package).

The binary comes from `scripts/llama-server.sh` (built once per machine, cached under
``${XDG_CACHE_HOME:-~/.cache}/kvbudget/llama.cpp/<version>/``). Servers start on 127.0.0.1 with
a free port, ``--metrics`` and ``-lv 4`` (the KV allocation lines are only printed at trace
verbosity), and are stopped by PID, waiting for the process to exit (shutdown takes 1.5-2.5 s; a
new server must not race a dying one).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    cache: str  # "single", or "non-SWA" / "SWA" for the interleaved sliding-window cache


def parse_kv_log(text: str) -> list[KvLogLine]:
    """All KV allocations in a server log, in order."""
    out: list[KvLogLine] = []
    buffer_mib = ""
    which = "single"
    for line in text.splitlines():
        if m := ISWA_RE.search(line):
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


def parse_prometheus(text: str) -> dict[str, float]:
    """Series name (no labels: llama.cpp's metrics carry none) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = float(sample.value)
    return values


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """A running llama-server process (stop() by PID)."""

    binary: Path
    model: Path
    log_path: Path
    args: list[str]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    version: str = ""
    started_s: float = 0.0
    _log: Any = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kv_lines(self) -> list[KvLogLine]:
        return parse_kv_log(self.log_text())

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout_s) as r:
                return int(r.status), bytes(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())

    def post_json(self, path: str, body: dict[str, Any], timeout_s: float = 120.0) -> Any:
        req = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())

    def metrics(self) -> dict[str, float]:
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics answered {status}: {body[:200]!r}"
        return parse_prometheus(body.decode())

    def start(self) -> None:
        self._log = self.log_path.open("wb")
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
        self.started_s = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = "\n".join(self.log_text().splitlines()[-25:])
                raise RuntimeError(
                    f"llama-server exited with {self.proc.returncode} while starting "
                    f"({' '.join(self.args)}); log {self.log_path}:\n{tail}"
                )
            try:
                status, _ = self.get("/health", timeout_s=2.0)
                if status == 200:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"llama-server not healthy after {STARTUP_TIMEOUT_S:.0f} s; log {self.log_path}"
        )

    def stop(self) -> None:
        """SIGTERM this PID, wait for it to exit (SIGKILL after STOP_TIMEOUT_S)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None


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
