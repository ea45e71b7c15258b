"""Golden engine-pool figures, each worked by hand in this file from the engine formulas.

Formulas (``/work/shared/reference/engines-kv-accounting.md``):
page = 2*B*H_rank*D*s (MLA: B*576*s, fp8_ds_mla: B*656); H_rank = max(1, kv_heads // tp);
num_blocks = avail // page // group_size (min over PP stages); v0.11 token line =
num_blocks // num_groups * B; concurrency (v0.9+) = num_blocks / cdiv(Σ_g max_mem_g, page).
``--kv-cache-memory`` pins ``avail`` so no estimate enters these numbers.
"""

from __future__ import annotations

import pytest

from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.pool import group_layers
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

GiB = 1 << 30
TEN_GIB = 10 * GiB


def dense(
    num_layers: int = 32, kv_heads: int = 8, head_dim: int = 128, max_pos: int = 131072
) -> ModelSpec:
    """A Llama-3.1-8B-shaped dense GQA model."""
    return ModelSpec(
        model_id="test/dense-gqa",
        architecture="LlamaForCausalLM",
        model_type="llama",
        layers=tuple(FullAttention(i, kv_heads, head_dim) for i in range(num_layers)),
        hidden_size=4096,
        num_attention_heads=32,
        vocab_size=128256,
        intermediate_size=14336,
        max_position_embeddings=max_pos,
        torch_dtype="bfloat16",
    )


def plan(spec: ModelSpec, **kw: object) -> PlanResult:
    fields: dict[str, object] = {"model": spec.model_id, "gpu": "H100", "engine_version": "0.11.0"}
    fields.update(kw)
    return make_plan(PlanRequest(**fields), spec)  # type: ignore[arg-type]


# --- dense GQA at TP 1/2/4/8 and replication --------------------------------------------------


# page = 2 * 16 * H_rank * 128 * 2 = 8192 * H_rank bytes; 32 layers; avail = 10 GiB
# TP1: H=8 page 65536 -> 10737418240 // 65536 = 163840 // 32 = 5120 blocks
# TP2: H=4 page 32768 -> 327680 // 32 = 10240; TP4: H=2 -> 20480; TP8: H=1 -> 40960
# TP16: max(1, 8 // 16) = 1 head, replicated -> page stays 8192 -> 40960 (no further shrink)
@pytest.mark.parametrize(
    ("tp", "blocks"), [(1, 5120), (2, 10240), (4, 20480), (8, 40960), (16, 40960)]
)
def test_dense_gqa_blocks_by_tp(tp: int, blocks: int) -> None:
    r = plan(dense(), tp=tp, kv_cache_memory_bytes=TEN_GIB, max_model_len=32768)
    assert r.num_blocks == blocks
    assert r.num_usable_blocks == blocks - 1  # block 0 is the null block
    assert r.kv_cache_tokens == blocks * 16  # v0.11, one group: num_blocks // 1 * 16
    # concurrency = num_blocks / cdiv(32768, 16) = num_blocks / 2048
    assert r.max_concurrency == pytest.approx(blocks / 2048)
    assert (
        r.log_lines[-1]
        == f"Maximum concurrency for 32,768 tokens per request: {blocks / 2048:.2f}x"
    )


def test_replication_when_kv_heads_below_tp() -> None:
    # 4 KV heads at TP 8: each rank holds max(1, 4 // 8) = 1 head -> page 8192, same as TP 4
    tp4 = plan(dense(kv_heads=4), tp=4, kv_cache_memory_bytes=TEN_GIB, max_model_len=8192)
    tp8 = plan(dense(kv_heads=4), tp=8, kv_cache_memory_bytes=TEN_GIB, max_model_len=8192)
    assert tp4.page_size_bytes == tp8.page_size_bytes == 2 * 16 * 1 * 128 * 2
    assert tp8.num_blocks == tp4.num_blocks == TEN_GIB // 8192 // 32 == 40960
    # per replica the replicated head is stored 8 times: 8 ranks x 32 layers x 512 B per token
    assert tp8.kv_bytes_per_token_replica == 8 * 32 * 2 * 1 * 128 * 2


def test_fp8_halves_the_page() -> None:
    r = plan(dense(), kv_dtype="fp8", kv_cache_memory_bytes=TEN_GIB, max_model_len=32768)
    assert r.page_size_bytes == 2 * 16 * 8 * 128 * 1 == 32768
    assert r.num_blocks == TEN_GIB // 32768 // 32 == 10240


# --- pipeline parallel --------------------------------------------------------------------------


def test_pp2_even_split() -> None:
    # 32 layers / 2 stages = 16 each: 10 GiB // 65536 // 16 = 10240 blocks per stage
    r = plan(dense(), pp=2, kv_cache_memory_bytes=TEN_GIB, max_model_len=32768)
    assert [s.num_layers for s in r.ranks] == [16, 16]
    assert r.num_blocks == 10240
    assert r.kv_cache_tokens == 10240 * 16


def test_pp2_uneven_split_takes_the_fuller_stage() -> None:
    # 61 layers: 61 // 2 = 30 each, the remainder 1 goes to partition [-2] = stage 0 -> 31 / 30
    # num_blocks = min(163840 // 31, 163840 // 30) = min(5285, 5461) = 5285
    r = plan(dense(num_layers=61), pp=2, kv_cache_memory_bytes=TEN_GIB, max_model_len=8192)
    assert [s.num_layers for s in r.ranks] == [31, 30]
    assert [s.num_blocks for s in r.ranks] == [5285, 5461]
    assert r.num_blocks == 5285


def test_pp2_fit_check_counts_all_layers() -> None:
    # needed = 32 layers x cdiv(32768, 16) x 65536 = 4 GiB; avail 3 GiB per stage.
    # One stage alone (16 layers) would need 2 GiB, but the engine counts all 32 (issue #34076).
    # estimate = floor(3 GiB / (32 x 65536)) x 16 = 1536 x 16 = 24576
    r = plan(dense(), pp=2, kv_cache_memory_bytes=3 * GiB, max_model_len=32768)
    assert r.needed_bytes == 4 * GiB
    assert not r.fits
    assert r.estimated_max_model_len == 24576
    assert r.num_blocks == 3 * GiB // 65536 // 16 == 3072


# --- MLA ------------------------------------------------------------------------------------------


def test_mla_deepseek_v3_block_64_not_split_by_tp() -> None:
    spec = resolve_model("deepseek-ai/DeepSeek-V3").spec
    assert spec is not None
    # page = 64 x (512 + 64) x 2 = 73728; 10737418240 // 73728 = 145635; // 61 layers = 2387
    for tp in (1, 8):
        r = plan(spec, tp=tp, kv_cache_memory_bytes=TEN_GIB, max_model_len=32768)
        assert r.block_size == 64
        assert r.page_size_bytes == 73728
        assert r.num_blocks == 2387
        assert r.kv_cache_tokens == 2387 * 64
        assert r.kv_bytes_per_token_per_rank == 61 * 576 * 2
    # fp8: 576 B per token per layer (reference §1.3) -> page 64 x 576 = 36864
    fp8 = plan(spec, kv_dtype="fp8", kv_cache_memory_bytes=TEN_GIB, max_model_len=32768)
    assert fp8.page_size_bytes == 64 * 576
    assert fp8.kv_bytes_per_token_per_rank == 61 * 576
    # fp8_ds_mla: 656 B per token -> page 41984; 10737418240 // 41984 = 255750; // 61 = 4192
    r = plan(spec, kv_dtype="fp8_ds_mla", kv_cache_memory_bytes=TEN_GIB, max_model_len=32768)
    assert r.page_size_bytes == 64 * 656
    assert r.num_blocks == 4192


# --- sliding / full hybrid with two groups ----------------------------------------------------


def test_gpt_oss_120b_two_groups() -> None:
    spec = resolve_model("openai/gpt-oss-120b").spec
    assert spec is not None
    r = plan(spec, kv_cache_memory_bytes=TEN_GIB, max_model_len=131072)
    # reference §2.1: 36 layers = 18 SWA(128) + 18 full -> 2 groups x 18 layers
    assert [(g.kind, g.num_layers, g.sliding_window) for g in r.groups] == [
        ("sliding", 18, 128),
        ("full", 18, None),
    ]
    # page = 2 x 16 x 8 x 64 x 2 = 32768; num_blocks = 10 GiB // 32768 // 18 = 327680 // 18 = 18204
    assert r.page_size_bytes == 32768
    assert r.num_blocks == 18204
    # v0.11 token line: 18204 // 2 groups x 16 = 145632
    assert r.kv_cache_tokens == 145632
    # H100 default T_b = 8192: sliding max_mem = cdiv(min(127 + 8192, 131072), 16) + 1 = 520 + 1
    # full = cdiv(131072, 16) = 8192 -> concurrency = 18204 / 8713
    assert r.max_num_batched_tokens == 8192
    assert r.max_concurrency == pytest.approx(18204 / 8713)
    assert "2.09x" in r.log_lines[-1]
    new = plan(spec, kv_cache_memory_bytes=TEN_GIB, max_model_len=131072, engine_version="0.20.1")
    assert new.kv_cache_tokens == int(18204 / 8713 * 131072)


def test_gpt_oss_20b_eagle_balance_rule() -> None:
    # reference §2.1: 12 SWA + 13 full; newest: 13 < 1.5 x 12 -> group_size 13 -> 13/13 (SWA padded by 1)
    layers = [VllmLayerSpec(i, "sliding", 16, 32768, sliding_window=128) for i in range(12)]
    layers += [VllmLayerSpec(12 + i, "full", 16, 32768) for i in range(13)]
    new = group_layers(layers, strided=True)
    assert [(g.kind, g.num_layers, g.num_padding_layers) for g in new] == [
        ("sliding", 12, 1),
        ("full", 13, 0),
    ]
    # ~v0.9: group_size = min = 12, contiguous: SWA 12, full 12 + 1 (11 padding)
    old = group_layers(layers, strided=False)
    assert [(g.kind, g.num_layers, g.num_padding_layers) for g in old] == [
        ("sliding", 12, 0),
        ("full", 12, 0),
        ("full", 1, 11),
    ]


# --- Mamba hybrid -----------------------------------------------------------------------------


def test_jamba_mamba_hybrid() -> None:
    spec = resolve_model("ai21labs/AI21-Jamba-1.5-Mini").spec
    assert spec is not None
    r = plan(spec, kv_cache_memory_bytes=TEN_GIB, max_model_len=4096)
    # mamba1 state (bf16): conv (4-1, 2*4096) + ssm (8192, 16) = (24576 + 131072) x 2 = 311296 B
    # attention per token: 2 x 8 x 128 x 2 = 4096 B -> block = 16 x cdiv(311296, 16 x 4096) = 80
    assert r.block_size == 80
    assert r.page_size_bytes == 80 * 4096 == 327680
    # 4 attention layers (period 8, offset 4) + 28 mamba: group_size 4 -> 1 full + 7 mamba groups
    kinds = sorted(g.kind for g in r.groups)
    assert kinds == ["full"] + ["mamba"] * 7
    assert all(g.num_layers == 4 for g in r.groups)
    # num_blocks = 10 GiB // 327680 // 4 = 32768 // 4 = 8192; token line 8192 // 8 x 80 = 81920
    assert r.num_blocks == 8192
    assert r.kv_cache_tokens == 81920
    # per request: full cdiv(4096, 80) = 52 blocks + 7 mamba groups x 1 page = 59
    assert r.max_concurrency == pytest.approx(8192 / 59)


def test_hand_built_mamba_hybrid_block_raise() -> None:
    from kvbudget.capacity.pool_templates import raise_attention_block_for_mamba

    # attention 4096 B per token at B=16; mamba page 1,000,000 B:
    # block = 16 x cdiv(1000000, 65536) = 16 x 16 = 256 -> page 1,048,576; mamba padded to it
    layers = [VllmLayerSpec(0, "mamba", 16, 1_000_000), VllmLayerSpec(1, "mamba", 16, 1_000_000)]
    layers += [VllmLayerSpec(2, "mamba", 16, 1_000_000), VllmLayerSpec(3, "full", 16, 16 * 4096)]
    raised = raise_attention_block_for_mamba(layers)
    assert {(x.kind, x.block_size, x.page_size_bytes) for x in raised} == {
        ("mamba", 256, 1_048_576),
        ("full", 256, 1_048_576),
    }
    groups = group_layers(raised)
    assert len(groups) == 4  # group_size = min(1, 3) = 1 (3 >= 1.5): 3 mamba groups + 1 full


def test_gpt_oss_120b_hybrid_manager_disabled_one_group() -> None:
    # §2.1 step 1: sliding layers become full attention -> one group of 36 layers;
    # num_blocks = 10 GiB // 32768 // 36 = 327680 // 36 = 9102; concurrency = 9102 / cdiv(131072, 16)
    spec = resolve_model("openai/gpt-oss-120b").spec
    assert spec is not None
    r = plan(
        spec,
        kv_cache_memory_bytes=TEN_GIB,
        max_model_len=131072,
        disable_hybrid_kv_cache_manager=True,
    )
    assert [(g.kind, g.num_layers) for g in r.groups] == [("full", 36)]
    assert r.num_blocks == 9102
    assert r.kv_cache_tokens == 9102 * 16
    assert r.max_concurrency == pytest.approx(9102 / 8192)


def test_needed_bytes_padding_counted_only_in_newer_versions() -> None:
    from kvbudget.capacity.pool import needed_bytes

    # 12 SWA(128) + 13 full, page 32768, B 16 -> strided groups 12(+1 pad) and 13
    layers = [VllmLayerSpec(i, "sliding", 16, 32768, sliding_window=128) for i in range(12)]
    layers += [VllmLayerSpec(12 + i, "full", 16, 32768) for i in range(13)]
    groups = group_layers(layers)
    # L = 4096, T_b = 2048: sliding blocks = cdiv(min(127 + 2048, 4096), 16) + 1 = 137; full = 256
    # newest: group_size 13 x page x (137 + 256); ~v0.9: 12 x 137 x page + 13 x 256 x page
    assert needed_bytes(groups, 4096, 2048) == 13 * 32768 * (137 + 256)
    assert needed_bytes(groups, 4096, 2048, per_layer=True) == (12 * 137 + 13 * 256) * 32768


def test_gpt_oss_pp2_groups_projected_per_stage() -> None:
    # groups are global (18 SWA + 18 full); stage 0 holds layers 0-17 = 9 of each group, so its
    # group_size is 9: num_blocks = 10 GiB // 32768 // 9 = 327680 // 9 = 36408 (same on stage 1)
    spec = resolve_model("openai/gpt-oss-120b").spec
    assert spec is not None
    r = plan(spec, pp=2, kv_cache_memory_bytes=TEN_GIB, max_model_len=131072)
    assert [rank.group_size for rank in r.ranks] == [9, 9]
    assert r.num_blocks == 36408
    # the fit check still counts every layer: 18 x 32768 x (521 + 8192) blocks per request
    assert r.needed_bytes == 18 * 32768 * (521 + 8192)


def test_pp_workers_allocate_the_common_block_count() -> None:
    # 61 layers PP2 (31 / 30): stage 1 could hold 5461 blocks but allocates the common 5285
    r = plan(dense(num_layers=61), pp=2, kv_cache_memory_bytes=TEN_GIB, max_model_len=8192)
    assert [s.kv_pool_bytes for s in r.ranks] == [5285 * 65536 * 31, 5285 * 65536 * 30]


def test_auto_fit_max_model_len() -> None:
    # §2.2 auto-fit: 1 GiB for 32 layers x 65536 B pages -> 1 GiB // 65536 // 32 = 512 blocks;
    # the longest fitting length is 512 x 16 = 8192 (down from 131072), concurrency 512 / 512 = 1.0
    r = plan(
        dense(), kv_cache_memory_bytes=1 << 30, max_model_len=131072, auto_fit_max_model_len=True
    )
    assert r.fits
    assert r.max_model_len == 8192
    assert r.log_lines[0] == (
        "Auto-fit max_model_len: reduced from 131072 to 8192 to fit in available GPU memory "
        "(1.0 GiB available for KV cache)"
    )
    assert r.max_concurrency == 1.0
