"""The refused-start branch of ``test_vllm_plan_vs_log`` on a recorded real vLLM log, in the
default suite (no engine needed), so its parsing and assertions run on every machine.

``fixtures/vllm-0.32.0-cpu-mqa-fp8-no-avx512-amx.log`` is what vLLM 0.32.0's CPU build printed
when started with fp8 KV on the tiny MQA model (``fixtures/tiny-mqa-config.json``, written by
``scripts/tiny_hf_model.py --arch mqa``) with AVX-512 and AMX hidden from its probes (the
``.cmd`` beside it: ``hide_cpu_features/sitecustomize.py``), recorded by the live test on
2026-12-02 on a 2-vCPU AMD EPYC with AVX-512: it logged ``Overriding num_gpu_blocks=65536 with
num_gpu_blocks_override=100`` and ``CPU KV cache size: 6,400 tokens, Maximum concurrency for
2,048 tokens per request: 3.12x``, then its worker raised ``NotImplementedError: FP8 KV cache on
CPU requires x86 with AVX-512 or AMX.`` (the lines the issue quotes from an AVX2-only EPYC).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.engines import load_bench
from tests.integration.vllm.test_vllm_plan_vs_log import (
    REFUSAL,
    assert_pool_as_logged,
    assert_refused_after_sizing,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LOG = FIXTURES / "vllm-0.32.0-cpu-mqa-fp8-no-avx512-amx.log"
CONFIG = FIXTURES / "tiny-mqa-config.json"
launcher = load_bench("vllm_server")


def test_recorded_refusal_pool_equals_plan() -> None:
    text = LOG.read_text()
    assert_refused_after_sizing(text)
    assert_pool_as_logged(CONFIG, launcher.parse_kv_log(text))


def test_the_branch_fails_on_a_log_that_does_not_show_it() -> None:
    text = LOG.read_text()
    # the engine did not refuse
    started = "\n".join(line for line in text.splitlines() if "NotImplementedError" not in line)
    with pytest.raises(AssertionError):
        assert_refused_after_sizing(started)
    # it refused before sizing the pool
    with pytest.raises(AssertionError):
        assert_refused_after_sizing(REFUSAL + "\n" + text.split(REFUSAL)[0])
    # a pool plan does not reproduce (one more 64-token block: 6,464 tokens, 3.16x)
    other = text.replace(
        "6,400 tokens, Maximum concurrency for 2,048 tokens per request: 3.12x",
        "6,464 tokens, Maximum concurrency for 2,048 tokens per request: 3.16x",
    )
    with pytest.raises(AssertionError):
        assert_pool_as_logged(CONFIG, launcher.parse_kv_log(other))
    # no pool lines at all
    with pytest.raises(AssertionError):
        assert_pool_as_logged(CONFIG, launcher.parse_kv_log(REFUSAL))
