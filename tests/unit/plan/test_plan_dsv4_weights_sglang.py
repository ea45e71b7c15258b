"""DeepSeek-V4's target weights under ``plan --engine sglang``: every parameter and persistent
buffer SGLang 0.5.23 builds on one GPU, worked by hand from its source (``sglang/srt/``, lines as
cited; the code under test, ``kvbudget.capacity.engines.sglang.dsv4_weights``, is never called).

Rules read from the source (on an H200, compute capability 9):

* fp8 linear ``in x out`` (``layers/quantization/fp8.py`` lines 613-690): ``in x out`` bytes of
  e4m3 plus one **float32** scale per 128 x 128 block (``use_mxfp8`` is off for ``quant_method``
  fp8); ``wo_a`` is fp8 too (``SGLANG_OPT_FP8_WO_A_GEMM`` default True, ``environ.py`` line
  1871; ``models/deepseek_v4.py`` lines 280-287, 1077-1135), ``wqkv_a`` fused (line 1885 there;
  ``deepseek_v4.py`` lines 1094-1101);
* MXFP4 routed experts (``fp8.py`` lines 1604-1719; on SM90 ``flashinfer_mxfp4``'s cutlass
  method keeps the scales float8_e8m0fnu, ``mxfp4_flashinfer_cutlass_moe.py`` lines 75-84,
  picked by ``arg_groups/model_overrides/deepseek_v4.py`` lines 66-87): per expert with ``I``
  rows per rank, ``w13 = 2I x (H/2 + H/32)``, ``w2 = H x (I/2 + I/32)`` bytes;
* decoder layer (``deepseek_v4.py`` lines 3106-3200, 639-660): two bf16 norms, fp32
  ``hc_{attn,ffn}_fn (24, 4H)``, ``_base (24)``, ``_scale (3)``;
* attention (lines 1092-1201): fp32 ``attn_sink`` of all 64 heads whatever the TP;
  ``wqkv_a H -> q_lora + 512`` replicated; bf16 ``q_norm``, ``kv_norm``; ``wq_b q_lora -> 64 x
  512 / tp``; ``wo_a 64 x 512 / 8 -> 8 x o_lora / tp``; ``wo_b 8 x o_lora / tp -> H``;
* ``Compressor`` (``layers/attention/dsv4/compressor.py`` lines 63-79, ``coff = 1 + (ratio ==
  4)``): fp32 ``ape (ratio, coff d)``, bf16 ``wkv_gate H -> 2 coff d``, **fp32** ``norm (d)``;
* ``C4Indexer`` (``indexer.py`` lines 1154-1215): fp8 ``wq_b q_lora -> 64 x 128`` replicated,
  bf16 ``weights_proj H -> 64``, its compressor (d 128, ratio 4);
* ``DeepseekV2MoE`` (``models/deepseek_v2.py`` lines 503-541, 651-900): bf16 gate ``H x E``;
  int32 ``tid2eid (vocab, 6)`` on the 3 hash layers (``layers/moe/hash_topk.py`` line 66), else
  fp32 ``e_score_correction_bias (E)``; the shared expert fp8, ``2048 / tp`` rows per rank;
* per stage: bf16 embedding and head ``vocab / tp x H`` (vocab 129,280 a multiple of 64), bf16
  norm, fp32 ``hc_head_fn (4, 4H)``, ``hc_head_base (4)``, ``hc_head_scale (1)`` (lines
  3765-3850, 4706-4716);
* rotary tables: a complex64 ``freqs_cis (1,048,576, 32)`` per ``precompute_freqs_cis`` key
  (``kernels/ops/attention/dsv4/rope.py`` lines 27-68: ratio-0 layers and compressed layers
  differ in base and ``original_seq_len``), and an fp32 ``cos_sin_cache`` per ``get_rope`` key
  (``layers/rotary_embedding/factory.py`` lines 126-170, ``base.py`` lines 115-120,
  ``rope_variant.py`` lines 406-417): ratio 0 ``1,048,576 x 64``, compressed ``65,536 x 16 x
  64``: four tables of 268,435,456 B.

The old figure was the generic count, every expert fp8: 67.97 GiB per GPU at TP 4.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.spec.catalog import MODELS_DIR

ROPE = 1_048_576 * 64 * 4  # one table: 268,435,456 B


def _request(tp: int, model: str = "deepseek-ai/DeepSeek-V4-Flash", gpu: str = "H200",
             **extra: object) -> PlanRequest:  # fmt: skip
    return PlanRequest(
        model=model,
        engine="sglang",
        gpu=gpu,
        tp=tp,
        max_model_len=65536,
        **extra,  # type: ignore[arg-type]
    )


def _fp8(n_in: int, n_out: int) -> int:
    """e4m3 weight + one float32 per 128 x 128 block (whole blocks here)."""
    assert n_in % 128 == 0 and n_out % 128 == 0
    return n_in * n_out + 4 * (n_in // 128) * (n_out // 128)


# DeepSeek-V4-Flash: H 4096, 64 heads of 512, q_lora 1024, o_lora 1024, 8 groups, 256 experts of
# 2048 rows, 1 shared, vocab 129,280, 43 layers with compress ratios 0, 0, (4, 128) x 20, 4, 0:
# 3 of ratio 0, 21 of ratio 4, 20 of ratio 128

COMMON = (
    2 * 4096 * 2  # input_layernorm, post_attention_layernorm
    + 2 * (24 * 16384 + 24 + 3) * 4  # hc_attn_*, hc_ffn_*
    + 64 * 4  # attn_sink, all heads
    + _fp8(4096, 1536)  # wqkv_a
    + (1024 + 512) * 2  # q_norm, kv_norm
    + 4096 * 256 * 2  # gate
)
C4 = (4 * 1024 * 4 + 4096 * 2048 * 2 + 512 * 4) + (  # compressor
    _fp8(1024, 8192) + 4096 * 64 * 2 + (4 * 256 * 4 + 4096 * 512 * 2 + 128 * 4)
)  # indexer: wq_b, weights_proj, its compressor
C128 = 128 * 512 * 4 + 4096 * 1024 * 2 + 512 * 4
ROUTING = 3 * 129280 * 6 * 4 + 40 * 256 * 4  # 3 hash tables, 40 routing biases
LAST = 4096 * 2 + (4 * 16384 + 4 + 1) * 4  # norm, hc_head_*


def _mxfp4(rows: int, scale_bytes: int = 1) -> int:
    """256 MXFP4 experts of ``rows`` rows: int8 weights two values a byte, a scale per 32."""
    return 256 * (
        2 * rows * (2048 + scale_bytes * 128) + 4096 * (rows // 2 + scale_bytes * rows // 32)
    )


def _flash(tp: int) -> int:
    rows = 2048 // tp
    attention = _fp8(1024, 32768 // tp) + _fp8(4096, 8192 // tp) + _fp8(8192 // tp, 4096)
    shared = _fp8(4096, 2 * rows) + _fp8(rows, 4096)
    layer = COMMON + attention + shared + _mxfp4(rows)
    embed = 129280 // tp * 4096 * 2
    return 43 * layer + 21 * C4 + 20 * C128 + ROUTING + LAST + 4 * ROPE + 2 * embed


def test_flash_tp4_worked_by_hand() -> None:
    weights = make_plan(_request(4)).weights
    assert weights.source == "computed"
    assert weights.per_rank_bytes == (_flash(4),)


def test_flash_tp1_worked_by_hand() -> None:
    weights = make_plan(_request(1)).weights
    assert weights.per_rank_bytes == (_flash(1),)
    assert weights.total_bytes == _flash(1) - 4 * ROPE  # the parameters, no rotary tables


def test_flash_snapshot_split_by_sglangs_shares(tmp_path: Path) -> None:
    """A snapshot's total_size stays the total; each GPU holds its share of the parameters (TP 4
    over TP 1, rotary tables off both) plus its own four rotary tables."""
    total = 160_000_000_000
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    index = {"metadata": {"total_size": total}, "weight_map": {}}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    config = (MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8")
    (snapshot / "config.json").write_text(config, encoding="utf-8")
    request = _request(4).model_copy(update={"model": str(snapshot)})
    weights = make_plan(request).weights
    share, whole = _flash(4) - 4 * ROPE, _flash(1) - 4 * ROPE
    assert weights.source == "read"
    assert weights.total_bytes == total
    assert weights.per_rank_bytes == (int(total * share / whole) + 4 * ROPE,)


def test_unsplit_attention_keeps_the_generic_count_said() -> None:
    """TP 16: 8 output groups do not split over 16 ranks; the generic count stays, in a note."""
    weights = make_plan(_request(16)).weights
    assert any("not SGLang's: its attention at TP 16: 64 heads / 8" in n for n in weights.notes)


def test_weights_flag_kept() -> None:
    weights = make_plan(_request(4, weights_bytes=40 * 2**30)).weights
    assert weights.per_rank_bytes == (40 * 2**30,)


#: SGLang 0.5.23's own code run on the CPU, tensors on meta (``scripts/check_sglang_dsv4_weights.py
#: /tmp/sglq4``: ``create_fp8_weight_``, ``create_fp8_moe_weight_``, ``precompute_freqs_cis``
#: taken from its source as written), Flash at TP 4
SGLANG_OWN = {
    "wqkv_a": 6_292_992, "wq_b": 8_390_656, "wo_a": 8_390_656, "wo_b": 8_390_656,
    "indexer.wq_b": 8_390_656, "shared.gate_up": 4_195_328, "shared.down": 2_097_664,
    "experts.mxfp4_e8m0": 855_638_016, "experts.mxfp4_default": 1_006_632_960,
    "experts.fp8": 1_611_005_952, "freqs_cis": 268_435_456,
}  # fmt: skip


def test_pieces_as_sglangs_own_code_builds_them() -> None:
    assert _fp8(4096, 1536) == SGLANG_OWN["wqkv_a"]
    assert _fp8(1024, 8192) == SGLANG_OWN["wq_b"] == SGLANG_OWN["indexer.wq_b"]
    assert _fp8(4096, 2048) == SGLANG_OWN["wo_a"]
    assert _fp8(2048, 4096) == SGLANG_OWN["wo_b"]
    assert _fp8(4096, 1024) == SGLANG_OWN["shared.gate_up"]
    assert _fp8(512, 4096) == SGLANG_OWN["shared.down"]
    assert _mxfp4(512) == SGLANG_OWN["experts.mxfp4_e8m0"]
    assert _mxfp4(512, scale_bytes=4) == SGLANG_OWN["experts.mxfp4_default"]
    assert SGLANG_OWN["freqs_cis"] == ROPE


def test_b200_keeps_e8m0_expert_scales_after_loading() -> None:
    """On SM100 ``flashinfer_mxfp4`` is the TRT-LLM method: it stages float32 scales (the
    ``mxfp4_default`` figure above) and turns them e8m0 after loading
    (``mxfp4_flashinfer_trtllm_moe.py`` lines 261-269), before the pool is sized."""
    assert make_plan(_request(4, gpu="B200")).weights.per_rank_bytes == (_flash(4),)


def test_other_gpus_keep_the_generic_count_said() -> None:
    """Compute capability 8: no flashinfer_mxfp4 (``model_overrides/deepseek_v4.py`` lines
    76-87), Fp8MoEMethod's float32 scales: not priced, the note says why."""
    weights = make_plan(_request(4, gpu="A100-80GB")).weights
    assert any("MXFP4 routed experts on compute capability 8" in n for n in weights.notes)


def test_fp8_experts(tmp_path: Path) -> None:
    """``expert_dtype`` fp8 (Flash-Base; SGLang reads F8_E4M3 experts from the header): e4m3
    ``w13 (256, 1024, 4096)`` + ``w2 (256, 4096, 512)`` and float32 block scales."""
    config = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8"))
    config["expert_dtype"] = "fp8"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    fp8 = 256 * (3 * 512 * 4096 + 4 * (2 * 4 * 32 + 32 * 4))
    assert fp8 == SGLANG_OWN["experts.fp8"]
    weights = make_plan(_request(4, model=str(path))).weights
    assert weights.per_rank_bytes == (_flash(4) + 43 * (fp8 - _mxfp4(512)),)


def test_module_priced_weights_drop_the_counts_notes() -> None:
    """Every module is priced (q/k norms included), so the parameter count's notes on what it
    approximates or leaves out are not shown, under SGLang and vLLM alike."""
    from kvbudget.capacity.weights import APPROX_NOTE, NORMS_NOTE

    for engine in ("sglang", "vllm"):
        request = PlanRequest(
            model="deepseek-ai/DeepSeek-V4-Flash",
            engine=engine,
            gpu="H200",
            tp=4,
            max_model_len=65536,
        )
        notes = make_plan(request).notes
        assert APPROX_NOTE not in notes and NORMS_NOTE not in notes, engine
