"""`kvbudget plan --engine vllm --engine-version 0.32.0` against vLLM 0.32.0's own pool (CPU build).

The oracle is the engine: its start-up log (``CPU KV cache size: N tokens``, ``Maximum
concurrency for L tokens per request: Xx``, ``Overriding num_gpu_blocks=A with
num_gpu_blocks_override=B``) and ``vllm:cache_config_info`` ``num_gpu_blocks``. ``plan`` must
reproduce them exactly for: dense GQA (the suite's default server), and MQA with fp8 KV, a
non-default block size (64) and ``--num-gpu-blocks-override`` (the log's pre-override block count
checks the pool without the override). The pool memory is the engine's
``VLLM_CPU_KVCACHE_SPACE=1`` (GiB), given to plan as ``--kv-cache-memory 1GiB``.

fp8 KV needs AVX-512 or AMX on vLLM's CPU build (``_get_attn_isa``), which sizes and logs the
pool before it refuses, so the fp8 start proves the arithmetic on any x86 CPU and never skips:
with AVX-512/AMX (vLLM's own probe, asked in the engine's environment) the running engine's log
and ``cache_config_info``; without, the refused start's log (handed back by the launcher) and
vLLM's words. It starts twice: on this host as it is, and with AVX-512/AMX hidden from vLLM
(``hide_cpu_features/sitecustomize.py``), so both branches run on every machine.
The wider per-architecture oracle (sliding, hybrids, MLA, Mamba, ...) is issue 14's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvbudget.safety.servers import StartupExitError

# an engine start takes 30-90 s (minutes on a busy machine): generous per-test limits
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

OVERRIDE_BLOCKS = 100


def plan(config: Path, *args: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "kvbudget",
        "plan",
        "--model",
        str(config),
        "--engine",
        "vllm",
        "--engine-version",
        "0.32.0",
        "--gpu",
        "H100",
        "--kv-cache-memory",
        "1GiB",
        "--no-scenarios",
        "--json",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


#: the directory whose sitecustomize hides AVX-512/AMX from vLLM's probes (see its docstring)
HIDE_CPU_FEATURES = Path(__file__).resolve().parent / "hide_cpu_features"
#: the two CPUs the fp8 start is tried on: this host as it is, and this host with AVX-512 and AMX
#: hidden from vLLM (what an AVX2-only x86 CPU gives it); on an AVX2-only host both refuse
CPUS = {
    "host": {},
    "no-avx512-amx": {
        "PYTHONPATH": str(HIDE_CPU_FEATURES),
        "KVBUDGET_HIDE_CPU_FEATURES": "1",
        "ATEN_CPU_CAPABILITY": "avx2",
    },
}
#: vLLM 0.32.0's refusal (vllm/v1/attention/backends/cpu_attn.py, _get_attn_isa)
REFUSAL = "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."


@dataclass(frozen=True)
class Fp8Start:
    """One engine start with fp8 KV: the running server, or the error of a refused start."""

    fp8_kv_ok: bool  # vLLM's own probe in the engine's environment: AVX-512 or AMX
    server: Any | None
    refused: StartupExitError | None


def engine_fp8_probe(vllm: Any, env: dict[str, str]) -> bool:
    """The probe vLLM's ``_get_attn_isa`` makes (``torch.cpu._is_avx512_supported() or
    torch.cpu._is_amx_tile_supported()``), asked of the engine's torch in the engine's
    environment."""
    code = (
        "import torch.cpu as c; print(int(c._is_avx512_supported() or c._is_amx_tile_supported()))"
    )
    done = subprocess.run(
        [str(vllm.python), "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip() == "1"


@pytest.fixture(scope="module", params=list(CPUS))
def mqa_fp8_start(
    request: pytest.FixtureRequest,
    vllm: Any,
    vllm_launcher: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fp8Start]:
    env = CPUS[request.param]
    log = tmp_path_factory.mktemp(f"vllm-mqa-{request.param}") / "vllm.log"
    args = ["--kv-cache-dtype", "fp8", "--block-size", "64"]
    args += ["--num-gpu-blocks-override", str(OVERRIDE_BLOCKS)]
    server = vllm_launcher.VllmServer(
        python=vllm.python,
        model=vllm.model("mqa"),
        log_path=log,
        args=args,
        max_model_len=2048,
        version=vllm.version,
        extra_env=env,
    )
    ok = engine_fp8_probe(vllm, env)
    try:
        server.start()
    except StartupExitError as exc:
        yield Fp8Start(fp8_kv_ok=ok, server=None, refused=exc)
        return
    with server:
        yield Fp8Start(fp8_kv_ok=ok, server=server, refused=None)


def test_dense_gqa_pool_equals_vllm_log(vllm_server: Any) -> None:
    server = vllm_server
    log = server.kv_log()
    assert log is not None, server.log_path
    got = plan(server.model / "config.json", "--block-size", "128", "--max-model-len", "4096")
    assert got["kv_cache_tokens"] == log.kv_cache_size_tokens  # 1,048,576 observed
    assert f"{got['max_concurrency']:.2f}" == log.max_concurrency_x
    labels = server.metrics_text()
    assert f'num_gpu_blocks="{got["num_blocks"]}"' in labels


def assert_pool_as_logged(config: Path, log: Any) -> None:
    """``plan`` reproduces the fp8 MQA pool lines of a vLLM start-up log (``log`` parsed by
    the launcher's ``parse_kv_log``), started or refused."""
    assert log is not None, "no pool lines in the log"
    common = ["--kv-dtype", "fp8", "--block-size", "64", "--max-model-len", "2048"]
    # without the override: the pool vLLM computed before replacing it (65,536 observed)
    free = plan(config, *common)
    assert free["num_blocks"] == log.num_gpu_blocks_before_override
    # with it: the pool vLLM runs (or would have run)
    got = plan(config, *common, "--num-gpu-blocks-override", str(OVERRIDE_BLOCKS))
    assert got["num_blocks"] == OVERRIDE_BLOCKS
    assert got["kv_cache_tokens"] == log.kv_cache_size_tokens  # 6,400 observed
    assert f"{got['max_concurrency']:.2f}" == log.max_concurrency_x  # 3.12 observed
    assert log.max_concurrency_len == 2048


def assert_refused_after_sizing(text: str) -> None:
    """vLLM's words, after the pool lines: it sized the pool, then refused."""
    assert REFUSAL in text, text[-3000:]
    assert text.index("CPU KV cache size:") < text.rindex(REFUSAL)
    assert "Application startup complete" not in text  # it never served


def test_mqa_fp8_block64_override_pool_equals_vllm_log(
    mqa_fp8_start: Fp8Start, vllm: Any, vllm_launcher: Any
) -> None:
    start = mqa_fp8_start
    config = vllm.model("mqa") / "config.json"
    if start.fp8_kv_ok:  # AVX-512 or AMX: the engine runs its pool
        assert start.refused is None, f"vLLM refused fp8 KV with AVX-512/AMX: {start.refused}"
        server = start.server
        assert_pool_as_logged(config, server.kv_log())
        text = server.metrics_text()
        assert f'num_gpu_blocks="{OVERRIDE_BLOCKS}"' in text and 'block_size="64"' in text
        assert 'cache_dtype="fp8"' in text
        return
    # neither: vLLM sizes and logs the pool, then refuses; the log is the oracle
    assert start.refused is not None, "vLLM started with fp8 KV without AVX-512 or AMX"
    assert start.refused.returncode != 0
    text = start.refused.log_text
    assert_refused_after_sizing(text)
    assert_pool_as_logged(config, vllm_launcher.parse_kv_log(text))
