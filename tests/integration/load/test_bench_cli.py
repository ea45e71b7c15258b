"""``kvbudget bench`` / ``kvbudget serve`` bad input: one line naming the flag and the fix."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

KVB = [sys.executable, "-m", "kvbudget"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVB, *args], capture_output=True, text=True, timeout=60, check=False)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "kind", "needle"),
    [
        (["--arrival", "poisson", "--num-requests", "3"], "ConfigError", "rate"),
        (["--num-requests", "3", "--ramp", "2:x"], "ConfigError", "--ramp"),
        (["--concurrency", "2"], "ConfigError", "num_requests or duration_s"),
        (["--num-requests", "3", "--timeout", "0"], "ConfigError", "--timeout=0.0"),
        (["--num-requests", "3", "--resume"], "ConfigError", "--resume needs --out"),
        (["--num-requests", "1"], "TargetError", "cannot reach"),
    ],
)
def test_bench_errors_are_one_line(args: list[str], kind: str, needle: str) -> None:
    proc = _run("bench", "--base-url", "http://127.0.0.1:1", "--model", "m", *args)
    assert proc.returncode == 2
    line = _one_line(proc)
    assert line.startswith(f"{kind}:")
    assert needle in line


def test_serve_port_in_use_is_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _run("serve", "--model", "m", "--port", str(port))
    assert proc.returncode == 2
    line = _one_line(proc)
    assert line.startswith("ConfigError:") and f"--port {port}" in line


def test_help_mentions_every_load_shape() -> None:
    proc = _run("bench", "--help")
    assert proc.returncode == 0
    for word in ("closed", "poisson", "gamma", "burst", "ramp", "--workers", "--resume"):
        assert word in proc.stdout


def test_bench_against_kvbudget_serve_is_labelled_simulated(tmp_path: Path) -> None:
    """The client clock is real, but the engine is kvbudget's simulator: never 'measured'."""
    import asyncio

    from kvbudget.load.config import RunConfig
    from kvbudget.load.run import run_load
    from kvbudget.serve.app import ServeApp
    from kvbudget.serve.build import ServeEngineOptions, build_engine

    async def go() -> dict[str, object]:
        built = build_engine(ServeEngineOptions(model="tiny", step_s=0.001, num_gpu_blocks=256))
        async with ServeApp(built.replica, model_name="tiny", max_model_len=2048) as app:
            url = app.base_url
            cfg = RunConfig(
                base_url=url,
                model="tiny",
                concurrency=2,
                num_requests=4,
                prompt_tokens=16,
                output_tokens=4,
                timeout_s=30.0,
            )
            doc = await run_load(cfg, out_dir=tmp_path)
            return doc.provenance.model_dump()

    prov = asyncio.run(go())
    assert prov["kind"] == "simulated"
    assert prov["engine"] == "kvbudget-serve"
    assert prov["timing_model"]
