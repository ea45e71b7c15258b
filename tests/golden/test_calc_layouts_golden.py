"""Golden KV numbers for the vllm, sglang and llamacpp layouts, worked by hand in each test.

Expected values are arithmetic written out from the engines' formulas
(``/work/shared/reference/engines-kv-accounting.md`` §1, §3.4, §7 and ``llamacpp.md`` §2/§4) and
from engine log lines quoted there; none was produced by running the code under test.
"""

from __future__ import annotations

import pytest

from kvbudget.capacity.layouts.llamacpp import llamacpp_layout
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.layouts.vllm import get_pp_indices, vllm_layer_specs, vllm_layout
from kvbudget.spec.layers import FullAttention, LayerSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

MiB = 1 << 20


def catalog(model_id: str) -> ModelSpec:
    spec = resolve_model(model_id).spec
    assert spec is not None
    return spec


def dense(num_layers: int, kv_heads: int, head_dim: int, dtype: str = "bfloat16") -> ModelSpec:
    layers: tuple[LayerSpec, ...] = tuple(
        FullAttention(i, kv_heads, head_dim) for i in range(num_layers)
    )
    return ModelSpec("test/dense", "LlamaForCausalLM", "llama", layers, torch_dtype=dtype)


# ---------------------------------------------------------------- vLLM: dense GQA
def test_vllm_llama31_8b_seed_load() -> None:
    # page = B * H * (D + Dv) * s = 16 * 8 * 256 * 2 = 65,536; 4096 tokens = 256 blocks per layer
    # per sequence 32 layers * 256 * 65,536 = 536,870,912; 8 sequences = 4,294,967,296 (4 GiB)
    layout = vllm_layout(catalog("meta-llama/Llama-3.1-8B"), tokens=4096, seqs=8)
    specs = vllm_layer_specs(catalog("meta-llama/Llama-3.1-8B"))
    assert {s.page_size_bytes for s in specs} == {65_536}
    assert layout.bytes_per_sequence == 536_870_912
    assert layout.total_bytes == 4_294_967_296
    assert layout.padding == ""


def test_vllm_partial_block_is_padding() -> None:
    # 1000 tokens -> cdiv(1000, 16) = 63 blocks; 32 * 63 * 65,536 = 132,120,576
    layout = vllm_layout(catalog("meta-llama/Llama-3.1-8B"), tokens=1000, seqs=1)
    assert layout.bytes_per_sequence == 132_120_576
    assert layout.padding


@pytest.mark.parametrize(
    ("tp", "heads_per_rank", "per_rank_bytes"),
    [
        # 2 KV heads, D 128, bf16, 16 layers, 2048 tokens = 128 blocks; page = 16*h*256*2 = 8192*h
        (1, 2, 16 * 128 * 16_384),  # 33,554,432
        (2, 1, 16 * 128 * 8_192),  # 16,777,216
        (4, 1, 16 * 128 * 8_192),  # replicated: kv_heads 2 < tp 4 -> one head per rank
        (8, 1, 16 * 128 * 8_192),
    ],
)
def test_vllm_tp_split_and_replication(tp: int, heads_per_rank: int, per_rank_bytes: int) -> None:
    spec = dense(16, 2, 128)
    specs = vllm_layer_specs(spec, tp=tp)
    assert specs[0].page_size_bytes == 16 * heads_per_rank * 256 * 2
    layout = vllm_layout(spec, tokens=2048, seqs=1, tp=tp)
    assert layout.per_rank_max_bytes == per_rank_bytes
    assert layout.replica_bytes == per_rank_bytes * tp


def test_vllm_llama31_70b_tp8() -> None:
    # 8 KV heads / TP 8 = 1 per rank: page = 16 * 1 * 256 * 2 = 8,192; 8192 tokens = 512 blocks
    # per rank: 80 layers * 512 * 8,192 = 335,544,320
    layout = vllm_layout(catalog("meta-llama/Llama-3.1-70B"), tokens=8192, seqs=1, tp=8)
    assert layout.per_rank_max_bytes == 335_544_320
    assert layout.total_bytes == 8 * 335_544_320


def test_pp_indices_follow_vllm() -> None:
    # 61 layers, pp 2: 30 each, remainder 1 goes to partition [-2] -> [31, 30]
    assert get_pp_indices(61, 0, 2) == (0, 31)
    assert get_pp_indices(61, 1, 2) == (31, 61)
    # 30 layers, pp 4: 7 each, remainder 2 -> partitions [-2] and [-3] -> [7, 8, 8, 7]
    assert [get_pp_indices(30, r, 4) for r in range(4)] == [(0, 7), (7, 15), (15, 23), (23, 30)]


def test_vllm_pp2_llama31_8b() -> None:
    # 32 layers, pp 2 -> 16 + 16; each stage: 16 * 256 blocks * 65,536 = 268,435,456 for 4096 tokens
    layout = vllm_layout(catalog("meta-llama/Llama-3.1-8B"), tokens=4096, seqs=1, pp=2)
    assert [(s.layer_start, s.layer_end) for s in layout.stages] == [(0, 16), (16, 32)]
    assert [s.bytes_per_rank for s in layout.stages] == [268_435_456, 268_435_456]
    assert layout.replica_bytes == 536_870_912


# ---------------------------------------------------------------- vLLM: MLA
def test_vllm_mla_deepseek_v3() -> None:
    # MLA: head = kv_lora_rank + rope = 512 + 64 = 576, one "head", no factor 2; block 64 (FlashMLA)
    # page bf16 = 64 * 576 * 2 = 73,728; 4096 tokens = 64 blocks; 61 layers -> 287,834,112 per rank
    spec = catalog("deepseek-ai/DeepSeek-V3")
    assert vllm_layer_specs(spec)[0].page_size_bytes == 73_728
    layout = vllm_layout(spec, tokens=4096, seqs=1, tp=8)
    assert layout.per_rank_max_bytes == 287_834_112  # TP does not split the latent
    assert layout.replica_bytes == 8 * 287_834_112


@pytest.mark.parametrize(("kv_dtype", "page"), [("fp8", 64 * 576), ("fp8_ds_mla", 64 * 656)])
def test_vllm_mla_fp8_pages(kv_dtype: str, page: int) -> None:
    assert (
        vllm_layer_specs(catalog("deepseek-ai/DeepSeek-V3"), kv_dtype=kv_dtype)[0].page_size_bytes
        == page
    )


# ---------------------------------------------------------------- vLLM: sliding and chunked
def test_vllm_sliding_gemma3_1b() -> None:
    # 26 layers: full at i = 5, 11, 17, 23 (4), sliding(512) x22; 1 KV head, D 256 -> page 16*1*512*2 = 16,384
    # T = 4096: full holds 256 blocks; sliding holds cdiv(4096,16) - (4096-512)//16 = 256 - 224 = 32
    # per sequence: 4*256*16,384 + 22*32*16,384 = 16,777,216 + 11,534,336 = 28,311,552
    layout = vllm_layout(catalog("google/gemma-3-1b-it"), tokens=4096, seqs=1)
    assert layout.bytes_per_sequence == 28_311_552


def test_vllm_sliding_and_chunked_max_memory() -> None:
    sliding = next(
        s for s in vllm_layer_specs(catalog("google/gemma-3-1b-it")) if s.kind == "sliding"
    )
    # (cdiv(min(W - 1 + T_b, L), B) + 1) * page = (cdiv(min(511 + 2048, 4096), 16) + 1) * 16,384 = 161 * 16,384
    assert sliding.max_memory_usage_bytes(4096, 2048) == 161 * 16_384
    chunked = next(
        s
        for s in vllm_layer_specs(catalog("meta-llama/Llama-4-Scout-17B-16E-Instruct"))
        if s.kind == "chunked"
    )
    # 8 KV heads, D 128: page 65,536; cdiv(min(8192 + 2048, 16384), 16) = 640 blocks, no +1
    assert chunked.max_memory_usage_bytes(16_384, 2048) == 640 * 65_536
    full = next(
        s
        for s in vllm_layer_specs(catalog("meta-llama/Llama-4-Scout-17B-16E-Instruct"))
        if s.kind == "full"
    )
    assert full.max_memory_usage_bytes(16_384, 2048) == 1024 * 65_536


def test_vllm_chunked_blocks_held_llama4() -> None:
    # T = 10,000: chunk start ((T-1)//8192)*8192 = 8192 -> 8192/16 = 512 blocks freed; cdiv(10000,16) = 625
    # chunked layers hold 113 blocks, full layers 625; 36 chunked + 12 full, page 65,536
    layout = vllm_layout(
        catalog("meta-llama/Llama-4-Scout-17B-16E-Instruct"), tokens=10_000, seqs=1
    )
    assert layout.bytes_per_sequence == (36 * 113 + 12 * 625) * 65_536


# ---------------------------------------------------------------- vLLM: hybrid state
def test_vllm_hybrid_qwen3_next_block_raise_and_padding() -> None:
    # GDN state: conv (4-1, 2*16*128 + 32*128 = 8192) = 24,576 el; ssm (32, 128, 128) = 524,288 el; bf16
    # mamba page = (24,576 + 524,288) * 2 = 1,097,728. Attention per token: 2 heads*(256+256)*2 = 2,048
    # block = 16 * cdiv(1,097,728, 16 * 2,048) = 16 * 34 = 544; attention page = 544 * 2,048 = 1,114,112
    specs = vllm_layer_specs(catalog("Qwen/Qwen3-Next-80B-A3B-Thinking"))
    mamba = [s for s in specs if s.kind == "mamba"]
    full = [s for s in specs if s.kind == "full"]
    assert (len(mamba), len(full)) == (36, 12)
    assert {s.block_size for s in specs} == {544}
    assert {s.real_page_size_bytes for s in mamba} == {1_097_728}
    assert {s.page_size_bytes for s in specs} == {1_114_112}
    assert mamba[0].max_memory_usage_bytes(4096, 2048) == 1_114_112
    # 4096 tokens: full layers hold cdiv(4096, 544) = 8 blocks; each mamba layer one page
    layout = vllm_layout(catalog("Qwen/Qwen3-Next-80B-A3B-Thinking"), tokens=4096, seqs=1)
    assert layout.bytes_per_sequence == 12 * 8 * 1_114_112 + 36 * 1_114_112


def test_vllm_hybrid_jamba_block_raise() -> None:
    # mamba1: conv (4-1, 8192) = 24,576 el; ssm (8192, 16) = 131,072 el; bf16 -> 311,296 B
    # attention per token: 8 heads * 256 * 2 = 4,096; block = 16 * cdiv(311,296, 65,536) = 16 * 5 = 80
    specs = vllm_layer_specs(catalog("ai21labs/AI21-Jamba-1.5-Mini"))
    assert {s.block_size for s in specs} == {80}
    assert {s.page_size_bytes for s in specs} == {80 * 4_096}
    assert {s.real_page_size_bytes for s in specs if s.kind == "mamba"} == {311_296}


# ---------------------------------------------------------------- vLLM: fp8 and scales
@pytest.mark.parametrize(
    ("kv_dtype", "page"),
    [
        ("fp8", 16 * 8 * 256 * 1),  # 32,768
        ("fp8_e5m2", 16 * 8 * 256 * 1),
        (
            "int8_per_token_head",
            16 * 8 * 256 + 2 * 16 * 8 * 4,
        ),  # + fp32 scale per token per head, K and V
        ("fp8_per_token_head", 16 * 8 * 256 + 2 * 16 * 8 * 4),  # 33,792
        ("nvfp4", 16 * 8 * 2 * (128 // 2 + 128 // 16)),  # 18,432
    ],
)
def test_vllm_quantized_pages(kv_dtype: str, page: int) -> None:
    assert (
        vllm_layer_specs(catalog("meta-llama/Llama-3.1-8B"), kv_dtype=kv_dtype)[0].page_size_bytes
        == page
    )


# ---------------------------------------------------------------- SGLang
def test_sglang_cell_dense_and_tp() -> None:
    # cell = heads_per_rank * (D + Dv) * layers * s = 8 * 256 * 32 * 2 = 131,072 per token
    spec = catalog("meta-llama/Llama-3.1-8B")
    assert sglang_layout(spec, tokens=100, seqs=3).total_bytes == 131_072 * 100 * 3
    # TP 4: 2 heads per rank -> 32,768 per token per rank
    assert sglang_layout(spec, tokens=100, seqs=1, tp=4).per_rank_max_bytes == 32_768 * 100


def test_sglang_logged_pool_qwen3_235b_fp8() -> None:
    # vllm#21348 (quoted in engines-kv-accounting.md §7.1): Qwen3-235B-A22B-FP8 TP4, 367,404 tokens,
    # "K size: 8.23 GB" = 367,404 x 94 layers x 1 head x 128 x 2 B = 8,841,209,856 B (8.234 GiB).
    spec = dense(94, 4, 128)
    layout = sglang_layout(spec, tokens=367_404, seqs=1, tp=4)
    k_bytes = layout.per_rank_max_bytes // 2
    assert k_bytes == 8_841_209_856
    assert round(k_bytes / (1 << 30), 2) == 8.23


def test_sglang_mla() -> None:
    # (512 + 64) * 61 layers * 2 B = 70,272 per token, same on every TP rank; fp8: 35,136
    spec = catalog("deepseek-ai/DeepSeek-V3")
    assert sglang_layout(spec, tokens=10, seqs=1, tp=8).per_rank_max_bytes == 702_720
    assert sglang_layout(spec, tokens=10, seqs=1, kv_dtype="fp8_e4m3").total_bytes == 351_360


# ---------------------------------------------------------------- llama.cpp (llamacpp.md §2, §4)
TINY = dense(4, 2, 32, dtype="float16")  # n_layer 4, n_head_kv 2, head_dim 32 -> n_embd_k_gqa 64


@pytest.mark.parametrize(
    ("k_type", "v_type", "mib"),
    [
        (
            "f16",
            None,
            8.00,
        ),  # "size = 8.00 MiB (2048 cells, 4 layers, 4/4 seqs), K (f16): 4.00 MiB"
        ("q8_0", None, 4.25),  # K (q8_0): 2.12 MiB = 4 x 8192 x 68 B
        ("q4_0", None, 2.25),  # K (q4_0): 1.12 MiB = 4 x 8192 x 36 B
        ("q8_0", "f16", 6.125),  # "6.12 MiB ... K (q8_0): 2.12 MiB, V (f16): 4.00 MiB"
    ],
)
def test_llamacpp_logged_sizes(k_type: str, v_type: str | None, mib: float) -> None:
    # -c 8192 -np 4: 2048 cells x 4 streams = 8192 cells; tokens 2048 per slot
    layout = llamacpp_layout(TINY, tokens=2048, seqs=4, kv_dtype=k_type, v_dtype=v_type)
    assert layout.total_bytes == int(mib * MiB)


def test_llamacpp_np3_rounds_context() -> None:
    # -c 8192 -np 3: 8192/3 = 2730 -> pad 256 -> 2816 cells x 3 = 8448; "8.25 MiB" = 4 x 8448 x 128 x 2
    layout = llamacpp_layout(TINY, tokens=2730, seqs=3, ctx_size=8192)
    assert layout.total_bytes == 4 * 8448 * 128 * 2 == int(8.25 * MiB)
    assert layout.padding


def test_llamacpp_unified_same_total() -> None:
    # -kvu: one stream of 8192 cells, same 8.00 MiB
    assert llamacpp_layout(TINY, tokens=2048, seqs=4, unified=True).total_bytes == 8 * MiB


def test_llamacpp_swa_cache_gemma3_1b() -> None:
    # -c 4096 -np 1; full layers 4 x 4096 cells; SWA layers min(4096, pad256(512 + 512)) = 1024 cells
    # f16 row K = V = 1 head * 256 * 2 = 512 B -> per cell per layer 1,024 B
    # 4 * 4096 * 1024 + 22 * 1024 * 1024 = 16,777,216 + 23,068,672 = 39,845,888
    layout = llamacpp_layout(catalog("google/gemma-3-1b-it"), tokens=4096, seqs=1)
    assert layout.total_bytes == 39_845_888


def test_sglang_hybrid_state_pool_qwen3_next() -> None:
    # attention cell: 12 full layers x 2 heads x (256 + 256) x 2 B = 12 x 2,048 per token
    # state per sequence per GDN layer: conv (3, 8192) bf16 = 49,152 B + ssm (32,128,128) fp32 = 2,097,152 B
    # T = 1000, 2 sequences: 12*2048*1000*2 + 36*(49,152 + 2,097,152)*2 = 49,152,000 + 154,533,888
    layout = sglang_layout(catalog("Qwen/Qwen3-Next-80B-A3B-Thinking"), tokens=1000, seqs=2)
    assert layout.total_bytes == 203_685_888


def test_dp_replicas_multiply_and_pp_splits_sglang() -> None:
    spec = catalog("meta-llama/Llama-3.1-8B")
    one = vllm_layout(spec, tokens=4096, seqs=1)
    assert vllm_layout(spec, tokens=4096, seqs=1, dp=3).total_bytes == 3 * one.replica_bytes
    # PP 2 on SGLang: 16 layers per stage x 8 heads x 256 x 2 B = 65,536 B per token per stage
    staged = sglang_layout(spec, tokens=10, seqs=1, pp=2)
    assert [s.bytes_per_rank for s in staged.stages] == [655_360, 655_360]


def test_vllm_mamba2_tp_pads_groups() -> None:
    # mamba2, TP 4: n_groups 2 -> 2 + (4 - 2) = 4 (MambaStateShapeCalculator pads groups to TP);
    # conv_dim = 512 + 2*4*16 = 640 -> (4-1, 640/4) = 480 el; ssm (8/4, 64, 16) = 2,048 el; bf16
    # page = (480 + 2,048) * 2 = 5,056 B, one page per sequence per layer
    from kvbudget.spec.state_layers import StateLayer

    layers: tuple[LayerSpec, ...] = tuple(
        StateLayer(
            i,
            "mamba2",
            conv_kernel=4,
            intermediate_size=512,
            state_size=16,
            n_groups=2,
            num_heads=8,
            head_dim=64,
        )
        for i in range(3)
    )
    spec = ModelSpec("t/m2", "Mamba2ForCausalLM", "mamba2", layers, torch_dtype="bfloat16")
    specs = vllm_layer_specs(spec, tp=4)
    assert {s.page_size_bytes for s in specs} == {5_056}
    assert vllm_layout(spec, tokens=10_000, seqs=2, tp=4).per_rank_max_bytes == 3 * 5_056 * 2


# ---------------------------------------------------------------- vLLM: mamba cache modes
@pytest.mark.parametrize(
    ("mode", "spec_blocks", "held"),
    [
        # §1.6: "none" -> 1 + num_speculative_blocks pages, "align" -> 2 + num_speculative_blocks,
        # "all" -> cdiv(T, B) pages (one state per block of tokens): cdiv(100, 16) = 7
        ("none", 0, 1),
        ("none", 1, 2),
        ("align", 0, 2),
        ("align", 2, 4),
        ("all", 0, 7),
    ],
)
def test_vllm_mamba_blocks_held_per_cache_mode(mode: str, spec_blocks: int, held: int) -> None:
    from kvbudget.capacity.layouts.vllm import VllmLayerSpec, blocks_held

    layer = VllmLayerSpec(
        0,
        "mamba",
        16,
        4096,
        num_speculative_blocks=spec_blocks,
        mamba_cache_mode=mode,  # type: ignore[arg-type]
    )
    assert blocks_held(layer, 100) == held
    # a request of exactly L = 100 tokens holds what max_memory_usage_bytes budgets for it
    assert layer.max_memory_usage_bytes(100, 8192) == held * 4096
