"""Start verdicts and ``--dtype`` as vLLM 0.19.0 decides them (source cited per test)."""

from __future__ import annotations

import pytest

from kvbudget.capacity.activation import profile_activation
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.vllm_startup import derived_max_model_len
from kvbudget.errors import ConfigError
from kvbudget.units import GiB, MiB
from tests.unit.plan.gpu_logs import FIXTURES

LLAMA = str(FIXTURES / "catalog__meta-llama--Llama-3.1-8B.json")


def _plan(**kw: object) -> PlanResult:
    fields: dict[str, object] = {"model": LLAMA, "gpu": "H100", "engine_version": "0.19.0"}
    fields.update(kw)
    return make_plan(PlanRequest(**fields))


def test_sampler_warmup_that_cannot_fit_does_not_start() -> None:
    # 0.19.0 _dummy_sampler_run re-raises an OOM with these words. By hand: 16,384 requests x
    # 128,256 vocab x (2 + 4 + 4 + 4) B = 27.4 GiB of sampler tensors alone; with 15 GiB of
    # weights it still fits in 79.19 GiB, at 65,536 requests (110 GiB) it cannot.
    fits = _plan(max_model_len=8192, max_num_seqs=16384, max_num_batched_tokens=16384)
    assert fits.fits
    refused = _plan(max_model_len=8192, max_num_seqs=65536, max_num_batched_tokens=65536)
    assert not refused.fits
    assert refused.error == (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 65536 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine."
    )


def test_sampler_bytes_by_hand() -> None:
    from kvbudget.spec.resolve import resolve_model

    spec = resolve_model(LLAMA).spec
    assert spec is not None
    got = profile_activation(
        spec,
        dtype_bytes=2,
        tp=1,
        first_stage=True,
        last_stage=True,
        max_num_batched_tokens=8192,
        max_num_seqs=1024,
    )
    n, vocab, h, t = 1024, 128256, 4096, 8192
    by_hand = (
        n * vocab * (2 + 4 + 4 + 4)  # logits bf16, float32 copy, softmax, exponential noise
        + 132 * vocab * 4  # Triton top-k/top-p buffer, min(132 SMs, 1024) rows
        + t * h * 2
        + 2 * n * h * 2  # the forward's output, its 1024 rows, rand_like
        + 32 * MiB  # cuBLAS workspace
    )
    assert got.sampler_bytes == by_hand
    assert got.sampler_is_peak
    # vLLM 0.19.0 logged 1.89 GiB for this run (tests/fixtures/vllm_gpu_logs)
    assert by_hand / GiB == pytest.approx(1.89, abs=0.01)


def test_derived_length_scales_with_rope_factor() -> None:
    # 0.19.0 _get_and_verify_max_len: llama3 rope keeps max_position_embeddings (131072);
    # a linear factor 4 multiplies it
    from kvbudget.spec.resolve import resolve_model

    spec = resolve_model(LLAMA).spec
    assert spec is not None
    assert derived_max_model_len(spec) == 131072
    from dataclasses import replace

    linear = replace(
        spec,
        raw_config={**spec.raw_config, "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    )
    assert derived_max_model_len(linear) == 4 * 131072
    refused = _plan(max_model_len=131073)
    assert not refused.fits and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in (refused.error or "")


@pytest.mark.parametrize("name", ["auto", "half", "float16", "bfloat16", "float", "float32"])
def test_every_vllm_dtype_name_is_taken(name: str) -> None:
    result = _plan(max_model_len=8192, dtype=name)
    width = 4 if name in ("float", "float32") else 2
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) elements per token
    assert result.kv_bytes_per_token_per_rank == 32 * 8 * 128 * 2 * width


def test_float32_through_the_cli_budgets() -> None:
    # the CLI's three budgets read the plan's resolved KV dtype ("float32", not a
    # --kv-cache-dtype name); it used to be refused there. Structural bytes per token:
    # 32 layers x 2 (K, V) x 8 heads x 128 x 4 B = 262,144
    import json

    from click.testing import CliRunner

    from kvbudget.cli.plan import plan

    args = ["--model", LLAMA, "--gpu", "H100", "--dtype", "float32", "--max-model-len", "8192"]
    result = CliRunner().invoke(plan, [*args, "--engine-version", "0.19.0", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kv_dtype"] == "float32"
    assert doc["budgets"]["structural"]["bytes_per_token"] == 262_144


def test_unknown_dtype_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^dtype: 'fp64' is not one of vLLM's --dtype choices"):
        _plan(max_model_len=8192, dtype="fp64")


def test_default_vllm_version_is_the_newest_modelled() -> None:
    # issue 29: the default was 0.11.0 while users run 0.3x; the default is the newest version
    # kvbudget models, 0.33.0 (read from its PyPI wheel: docs/engine-facts.md "KV planning in 0.33")
    result = make_plan(PlanRequest(model=LLAMA, gpu="H100", max_model_len=8192))
    assert result.engine_version == "0.33.0"
    assert result.defaults_applied["engine_version"] == "0.33.0 (kvbudget default)"
    activation = result.ranks[0].activation
    assert activation.source == "computed" and "not re-read for 0.33.0" in activation.method


@pytest.mark.parametrize(
    ("gpu", "version", "flag", "expected"),
    [
        ("H100", "0.19.0", None, 16),  # FLASH_ATTN_MLA first on sm90, default 16 kept (issue 29)
        ("H200", "0.19.0", None, 16),
        ("H100", "0.19.0", 64, 64),  # --block-size is kept (user_specified_block_size)
        ("H100", "0.11.0", None, 64),  # before 0.19: the layout's default, unchanged
        ("A100", "0.19.0", None, 64),  # not Hopper: the layout's default
    ],
)
def test_mla_block_size_by_backend(gpu: str, version: str, flag: int | None, expected: int) -> None:
    result = make_plan(
        PlanRequest(
            model="deepseek-ai/DeepSeek-V2-Lite",
            gpu=gpu,
            engine_version=version,
            max_model_len=8192,
            block_size=flag,
            kv_cache_memory_bytes=10 * GiB,
        )
    )
    assert result.block_size == expected
