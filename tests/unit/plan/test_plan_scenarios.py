"""Length-mix concurrency, scenarios, CPU tier, the three budgets, versions and SGLang defaults."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import lognorm

from kvbudget.capacity.budget import three_budgets
from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.memory import CUDA_CONTEXT_BYTES
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.pool import KvCacheGroup
from kvbudget.capacity.scenarios import (
    LengthDistribution,
    Scenario,
    concurrency_for_lengths,
    cpu_tier_host_bytes,
    evaluate_scenario,
)
from kvbudget.capacity.sglang_pool import sglang_defaults
from kvbudget.capacity.versions import parse_version, vllm_behaviour
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec

GiB = 1 << 30
SPEC = ModelSpec(
    model_id="t/dense",
    architecture="LlamaForCausalLM",
    model_type="llama",
    layers=tuple(FullAttention(i, 8, 128) for i in range(32)),
    hidden_size=4096,
    num_attention_heads=32,
    vocab_size=128256,
    intermediate_size=14336,
    max_position_embeddings=131072,
    torch_dtype="bfloat16",
)


def dense_plan() -> PlanResult:
    # page 65536 B x 32 layers; 10 GiB -> 5120 blocks (5119 usable)
    return make_plan(
        PlanRequest(model="t", gpu="H100", kv_cache_memory_bytes=10 * GiB, max_model_len=32768),
        SPEC,
    )


def test_length_mix_by_hand() -> None:
    r = dense_plan()
    lengths = np.array([10, 16, 17, 100])
    c = concurrency_for_lengths(r, lengths)
    # blocks: cdiv(n, 16) = 1, 1, 2, 7 -> mean 2.75 -> 5119 // 2.75 = 1861
    assert c.seqs_for_mix == 1861
    # numpy median 16.5 -> 17 tokens -> 2 blocks -> 2559; p95 (linear) 87.55 -> 88 -> 6 blocks -> 853
    assert (c.median_tokens, c.blocks_at_median, c.seqs_at_median) == (17, 2, 2559)
    assert (c.p95_tokens, c.blocks_at_p95, c.seqs_at_p95) == (88, 6, 853)
    # slots 16+16+32+112 = 176; empty 6+0+15+12 = 33
    assert c.tail_waste_fraction == pytest.approx(33 / 176)


def test_sliding_group_blocks_are_window_bounded() -> None:
    g = KvCacheGroup(0, VllmLayerSpec(0, "sliding", 16, 4096, sliding_window=128), (0,))
    # full would be cdiv(10000, 16) = 625; window: cdiv(min(127 + 8192, 10000), 16) + 1 = 521
    assert g.blocks_for_tokens(10000, 8192) == 521
    assert g.blocks_for_tokens(100, 8192) == 7  # short sequences: cdiv(100, 16)


def test_cpu_tier_host_bytes() -> None:
    r = dense_plan()
    # 1000 tokens -> 63 blocks of 16 -> 1008 token slots x 131072 B (32 layers x 2 x 8 x 128 x 2)
    assert r.kv_bytes_per_token_replica == 131072
    assert cpu_tier_host_bytes(r, 1000) == 1008 * 131072


def test_scenario_replicas_and_headroom() -> None:
    r = dense_plan()
    sc = Scenario(
        name="x",
        lengths=LengthDistribution(median_tokens=1000, p95_tokens=8000),
        concurrency=50,
        duration_s=60,
        quality_gate="canary",
    )
    e = evaluate_scenario(r, sc)
    # p95 8000 tokens = 500 blocks -> 5119 // 500 = 10 per replica -> 5 replicas, 5 GPUs, 0 % headroom
    assert e.per_replica_capacity == 10
    assert (e.replicas_needed, e.gpus_needed) == (5, 5)
    assert e.headroom_fraction == pytest.approx(0.0)


def test_lognormal_grid_matches_scipy() -> None:
    dist = LengthDistribution(median_tokens=2000, p95_tokens=9000)
    grid = dist.grid(1_000_000)
    sigma = np.log(9000 / 2000) / 1.6448536269514722
    ref = lognorm(s=sigma, scale=2000)
    assert np.quantile(grid, 0.5) == pytest.approx(ref.ppf(0.5), rel=0.01)
    assert np.quantile(grid, 0.95) == pytest.approx(ref.ppf(0.95), rel=0.02)
    with pytest.raises(ValueError):
        LengthDistribution(median_tokens=10, p95_tokens=5)


def test_three_budgets_by_hand() -> None:
    r = dense_plan()
    b = three_budgets(r, SPEC)
    # structural: 32 x 2 x 8 x 128 x 2 = 131072 B per token; 32768 tokens = 4 GiB per sequence;
    # floor(max_concurrency) = floor(5120 / 2048) = 2 sequences -> 8 GiB
    assert b.structural.bytes_per_token == 131072
    assert b.structural.bytes_per_sequence == 4 * GiB
    assert b.structural.total_bytes == 8 * GiB
    # engine pool: 5120 blocks x 65536 B x 32 layers = 10 GiB
    assert b.engine_pool_bytes_per_rank == (10 * GiB,)
    peak = b.device_peak[0]
    rank = r.ranks[0]
    assert peak.peak_bytes == (
        CUDA_CONTEXT_BYTES
        + rank.weights.num_bytes
        + rank.activation.num_bytes
        + rank.non_torch.num_bytes
        + rank.cudagraph.num_bytes
        + 10 * GiB
    )
    assert peak.headroom_bytes == r.gpu.memory_bytes - peak.peak_bytes


def test_versions() -> None:
    assert parse_version("v0.10.1.1") == (0, 10, 1)
    assert parse_version("0.21.0rc1") == (0, 21, 0)
    with pytest.raises(ConfigError, match="engine_version"):
        parse_version("latest")
    assert vllm_behaviour("0.6.3").token_line == "v0"
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to "1" in the vllm 0.20.0, 0.20.2 and
    # 0.21.0 wheels' envs.py, "0" in 0.19.0's (issue 29; vLLM's log says "since v0.21.0")
    assert vllm_behaviour("0.21.0").subtracts_cudagraphs
    assert vllm_behaviour("0.20.0").subtracts_cudagraphs
    assert not vllm_behaviour("0.19.1").subtracts_cudagraphs


def test_sglang_defaults_by_era() -> None:
    assert sglang_defaults((0, 3, 0), gpu_memory_mib=81559, tp=8).mem_fraction_static == 0.83
    assert sglang_defaults((0, 4, 5), gpu_memory_mib=81559, tp=8).mem_fraction_static == 0.81
    assert sglang_defaults((0, 4, 5), gpu_memory_mib=81559, tp=2).mem_fraction_static == 0.87
    assert sglang_defaults((0, 4, 5), gpu_memory_mib=81559, tp=16).mem_fraction_static == 0.79
    # B200 (183359 MiB, > 160 GiB tier): 512 + 16384 x 1.5 + 512 x 2 + 128 = 26240 -> 0.857
    assert sglang_defaults((0, 5, 4), gpu_memory_mib=183359, tp=1).mem_fraction_static == 0.857
    # L4 (23034 MiB, < 35 GiB tier, tp < 4): 512 + 2048 x 1.5 + 24 x 2 + 128 = 3760 -> 0.837
    assert sglang_defaults((0, 5, 4), gpu_memory_mib=23034, tp=1).mem_fraction_static == 0.837


def test_remedies_name_numbers() -> None:
    r = make_plan(
        PlanRequest(model="t", gpu="H100", kv_cache_memory_bytes=GiB, max_model_len=131072), SPEC
    )
    assert not r.fits
    assert any(x.startswith("--max-model-len 8192") for x in r.remedies)
    assert any("--kv-cache-memory >= 17179869184" in x for x in r.remedies)


@pytest.mark.parametrize(
    ("version", "kv_dtype", "refused"),
    [
        # reference §4: v0.9.2 takes auto, fp8, fp8_e4m3, fp8_e5m2; v0.11-0.16 add bfloat16 and
        # fp8_ds_mla; float16, nvfp4 and the per-token-head types are only in the newest list
        ("0.9.2", "fp8_e5m2", False),
        ("0.9.2", "bfloat16", True),
        ("0.11.0", "bfloat16", False),
        ("0.11.0", "nvfp4", True),
        ("0.16.0", "fp8_per_token_head", True),
        ("0.16.0", "float16", True),
        ("0.20.1", "nvfp4", False),
    ],
)
def test_kv_dtype_must_exist_in_the_vllm_version(
    version: str, kv_dtype: str, refused: bool
) -> None:
    request = PlanRequest(
        model="t",
        gpu="H100",
        engine_version=version,
        kv_dtype=kv_dtype,
        kv_cache_memory_bytes=10 * GiB,
        max_model_len=32768,
    )
    if not refused:
        assert make_plan(request, SPEC).kv_dtype == kv_dtype
        return
    with pytest.raises(ConfigError) as err:
        make_plan(request, SPEC)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"kv_dtype: vLLM {version} does not accept --kv-cache-dtype {kv_dtype}")
    assert "--engine-version" in text


@pytest.mark.parametrize(
    ("version", "block_size", "refused"),
    [
        # reference §3.4: v0.9/0.10 BlockSize = Literal[1, 8, 16, 32, 64, 128]; v0.11-0.16 add 256;
        # the newest accepts any int > 0
        ("0.10.1", 256, True),
        ("0.11.0", 256, False),
        ("0.11.0", 7, True),
        ("0.15.0", 48, True),
        ("0.9.2", 32, False),
        ("0.20.1", 48, False),
    ],
)
def test_block_size_must_exist_in_the_vllm_version(
    version: str, block_size: int, refused: bool
) -> None:
    request = PlanRequest(
        model="t",
        gpu="H100",
        engine_version=version,
        block_size=block_size,
        kv_cache_memory_bytes=10 * GiB,
        max_model_len=32768,
    )
    if not refused:
        assert make_plan(request, SPEC).block_size == block_size
        return
    with pytest.raises(ConfigError, match=f"^block_size: vLLM {version} does not accept"):
        make_plan(request, SPEC)


def test_max_model_len_above_the_config_limit_does_not_start() -> None:
    # SPEC has max_position_embeddings 131072; vLLM 0.19.0 _get_and_verify_max_len raises a
    # ValueError for a larger max_model_len unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (issue 29:
    # kvbudget used to print a note and still say it fits)
    def plan_for(length: int, allow: bool = False) -> PlanResult:
        request = PlanRequest(
            model="t",
            gpu="H100",
            kv_cache_memory_bytes=80 * GiB,
            max_model_len=length,
            allow_long_max_model_len=allow,
        )
        return make_plan(request, SPEC)

    assert plan_for(131072).fits
    refused = plan_for(131073)
    assert not refused.fits and refused.error is not None
    assert refused.error.startswith(
        "ValueError: User-specified max_model_len (131073) is greater than the derived "
        "max_model_len (max_position_embeddings=131072"
    )
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in refused.error
    assert plan_for(131073, allow=True).fits
