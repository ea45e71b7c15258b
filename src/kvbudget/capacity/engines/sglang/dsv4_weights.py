"""DeepSeek-V4's target model on one GPU as SGLang 0.5.23 builds it (``sglang/srt/``; line numbers
are 0.5.23's), where it differs from vLLM's (:mod:`kvbudget.capacity.weights_dsv4`, whose sizes
and fp8-linear shape this reuses).

The fp8 checkpoints (``quant_method`` ``fp8``, blocks of 128 x 128) load as ``Fp8Config``:

* every fp8 linear: the e4m3 weight and one **float32** scale per 128 x 128 block
  (``Fp8LinearMethod.create_fp8_weight_``, ``layers/quantization/fp8.py`` lines 613-690:
  ``scale_dtype = torch.uint8 if use_mxfp8 else torch.float32``), whatever ``expert_dtype``;
  ``wo_a`` too (``SGLANG_OPT_FP8_WO_A_GEMM`` on by default, ``environ.py`` line 1871;
  ``models/deepseek_v4.py`` lines 280-287, 1127-1135), ``wqkv_a`` fused (``SGLANG_OPT_FUSE_WQA_WKV``,
  line 1885; ``deepseek_v4.py`` lines 1094-1101);
* the routed experts in the checkpoint's layout (SGLang probes the safetensors header,
  ``configs/model_config.py`` lines 745-760; kvbudget reads ``expert_dtype``): fp8 blocks with
  float32 scales as vLLM (``create_fp8_moe_weight_``, ``fp8.py`` lines 1545-1760), or MXFP4, int8
  weights two values a byte and one float8_e8m0fnu scale per 32 inputs (lines 1604-1719) under
  ``flashinfer_mxfp4``, which SGLang picks for fp4 experts on SM90 / SM100 / SM120
  (``arg_groups/model_overrides/deepseek_v4.py`` lines 66-87): the cutlass method (SM90 / SM120)
  creates them e8m0 (``mxfp4_flashinfer_cutlass_moe.py`` lines 75-84), the TRT-LLM one (SM100)
  stages float32 and keeps e8m0 after loading (``mxfp4_flashinfer_trtllm_moe.py`` lines 212-230,
  261-269; the pool is sized after ``empty_cache``, ``utils/common.py`` lines 427-447). Other
  compute capabilities keep ``Fp8MoEMethod``'s float32 scales through loading: not priced.

Per decoder layer, what differs from vLLM: ``attn_sink`` holds all ``num_attention_heads`` fp32,
not the local heads padded (``deepseek_v4.py`` line 1092); the compressors' ``norm`` is fp32
(``layers/attention/dsv4/compressor.py`` lines 63-79: ``ape`` fp32, ``wkv_gate`` bf16 without
``quant_config``); the indexer (``indexer.py`` lines 1154-1215) as vLLM's, its ``wq_b`` fp8 with
float32 scales; ``DeepseekV2MoE`` (``models/deepseek_v2.py`` lines 503-541, 651-900): the gate
in the model dtype, ``tid2eid (vocab, top_k)`` int32 on the hash layers (``layers/moe/
hash_topk.py`` lines 37-70), else the fp32 ``e_score_correction_bias``; the shared expert
(not fused: ``deepseek_v4.py`` lines 4864-4890) split over TP without padding.

Per stage: the embedding on the first (``VocabParallelEmbedding``, vocab padded to 64 and split
over TP, ``deepseek_v4.py`` lines 3765-3778), the head, final norm and fp32 ``hc_head_*`` on the
last only (lines 3835-3850, 4706-4716). Rotary tables, per distinct key of the stage's layers:
each layer's ``freqs_cis`` (``precompute_freqs_cis`` behind ``lru_cache(2)``,
``kernels/ops/attention/dsv4/rope.py`` lines 27-68; ``deepseek_v4.py`` lines 1169-1201), a
complex64 ``(max_position_embeddings, rope_dim / 2)``, one for the ratio-0 layers (theta
``rope_theta``) and one for the compressed (``compress_rope_theta``); and each layer's
``rotary_emb`` from ``get_rope`` (``deepseek_v4.py`` lines 1390-1402; shared by key,
``layers/rotary_embedding/factory.py`` lines 126-170), an fp32 ``cos_sin_cache`` (kept fp32 on
CUDA, ``rotary_embedding/base.py`` lines 115-120) of ``max_position_embeddings x rope_dim``
(ratio 0) or ``original_max_position_embeddings x factor x rope_dim`` (``deepseek_yarn``,
``rope_variant.py`` lines 406-417). No ``topk_indices_buffer`` is built with the model.

``expert_dtype`` absent is fp4, as SGLang's ``SGLANG_DSV4_FP4_EXPERTS`` default (``environ.py``
line 1731) when no safetensors header is at hand.

Not counted: the re-layouts after loading (DeepGEMM's ue8m0 scales, the MoE backend's shuffles).
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.capacity.dsv4_modules import (
    DSV4_FP8_BLOCK,
    dsv4_expert_dtype,
    dsv4_fp8_linear_bytes,
    dsv4_fp8_read,
    dsv4_routed_experts,
    dsv4_target_sizes,
)
from kvbudget.capacity.layouts.base import PpSplit
from kvbudget.capacity.weights import WeightsEstimate, without_count_notes
from kvbudget.capacity.weights_dsv4 import VOCAB_PADDING
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

__all__ = [
    "sglang_dsv4_nextn_bytes",
    "sglang_dsv4_stage_bytes",
    "sglang_dsv4_unpriced",
    "sglang_dsv4_weights",
    "sglang_mxfp4_scales_unpriced",
]

#: SGLang's fp8 block scale (``fp8.py`` lines 674-680)
FP32_SCALE = 4


def _ratios(model: ModelSpec, num_layers: int) -> list[int] | None:
    ratios = model.raw_config.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < num_layers:
        return None
    if not all(isinstance(r, int) and r in (0, 4, 128) for r in ratios[:num_layers]):
        return None
    return list(ratios[:num_layers])


def sglang_mxfp4_scales_unpriced(
    model: ModelSpec, compute_capability_major: int | None
) -> str | None:
    """Why SGLang's MXFP4 routed experts are not priced on this GPU (None: they are, or the GPU
    is not known): SGLang picks ``flashinfer_mxfp4`` (e8m0 scales) on SM90 / SM100 / SM120
    only."""
    cc = compute_capability_major
    quant = model.quantization_config or {}
    if quant and dsv4_expert_dtype(model) == "fp4" and cc is not None and cc not in (9, 10, 12):
        return (
            f"its MXFP4 routed experts on compute capability {cc}: SGLang picks flashinfer_mxfp4 "
            "(e8m0 scales) on SM90 / SM100 / SM120 only (arg_groups/model_overrides/"
            "deepseek_v4.py lines 76-87); elsewhere Fp8MoEMethod's float32 scales"
        )
    return None


def sglang_dsv4_unpriced(
    model: ModelSpec, *, tp: int, compute_capability_major: int | None = None
) -> str | None:
    """What of DeepSeek-V4's target SGLang 0.5.23 builds in a way this module does not price (one
    line), or None."""
    s = dsv4_target_sizes(model)
    if s is None:
        return (
            "a size its modules need (hidden_size, hc_mult, o_groups, index_topk, ...) is missing"
        )
    if _ratios(model, s["num_hidden_layers"]) is None:
        return (
            "compress_ratios: one per layer of 0, 4 or 128 is priced (SGLang also builds 1 and 2, "
            "DeepSeek-V4.1's, models/deepseek_v4.py lines 1049-1058, 1473-1490)"
        )
    quant = model.quantization_config or {}
    if quant and not dsv4_fp8_read(quant):
        return "its quantization: only fp8 blocks of 128 x 128 (SGLang's Fp8Config) are priced"
    if str(quant.get("moe_quant_algo") or "").upper() == "NVFP4":
        return "its NVFP4 routed experts (configs/model_config.py lines 773-791)"
    if quant and dsv4_expert_dtype(model) not in ("fp4", "fp8"):
        return f"expert_dtype {model.raw_config.get('expert_dtype')!r} (fp4 or fp8 are priced)"
    scales = sglang_mxfp4_scales_unpriced(model, compute_capability_major)
    if scales is not None:
        return scales
    heads, groups = s["num_attention_heads"], s["o_groups"]
    inter, shared = s["moe_intermediate_size"], s["moe_intermediate_size"] * s["n_shared_experts"]
    if heads % tp or groups % tp:
        return f"its attention at TP {tp}: {heads} heads / {groups} output groups do not split"
    rows_ok = inter % tp == 0 and shared % tp == 0
    if quant and not (rows_ok and (inter // tp) % DSV4_FP8_BLOCK == 0):
        return (
            f"its routed experts at TP {tp}: {inter} rows is no whole number of 128-row blocks per "
            "rank, which SGLang refuses ('The output_size of gate's and up's weight = ... is not "
            "divisible by weight quantization block_n = 128.', layers/quantization/fp8.py "
            "lines 1585-1603)"
        )
    if quant and (shared // tp) % DSV4_FP8_BLOCK:
        return f"its shared expert at TP {tp}: {shared // tp} rows per rank, no whole 128-blocks"
    return None


def _linear(model: ModelSpec, n_in: int, n_out: int) -> int:
    if not model.quantization_config:
        return n_in * n_out * (model.dtype_bytes or 2)
    return dsv4_fp8_linear_bytes(n_in, n_out, FP32_SCALE)


def _compressor(model: ModelSpec, head_dim: int, ratio: int) -> int:
    """``Compressor`` (``compressor.py`` lines 63-79): fp32 ``ape`` and ``norm``, bf16 gate."""
    coff = 1 + (ratio == 4)
    return (
        ratio * coff * head_dim * 4
        + (model.hidden_size or 0) * 2 * coff * head_dim * 2
        + (head_dim * 4)
    )


def _layer(model: ModelSpec, s: dict[str, int], index: int, ratio: int, tp: int) -> int:
    h, heads, d = s["hidden_size"], s["num_attention_heads"], s["head_dim"]
    q_lora, o_lora, groups = s["q_lora_rank"], s["o_lora_rank"], s["o_groups"]
    dtype_bytes = model.dtype_bytes or 2
    hc_dim, mix = s["hc_mult"] * h, (2 + s["hc_mult"]) * s["hc_mult"]
    total = 2 * h * dtype_bytes + 2 * (mix * hc_dim + mix + 3) * 4  # norms, hc_{attn,ffn}_*
    total += heads * 4  # attn_sink: every head, fp32 (deepseek_v4.py line 1092)
    total += _linear(model, h, q_lora + d)  # wqkv_a
    total += (q_lora + d) * dtype_bytes  # q_norm, kv_norm
    total += _linear(model, q_lora, heads * d // tp)  # wq_b
    total += _linear(model, heads * d // groups, groups * o_lora // tp)  # wo_a
    total += _linear(model, groups * o_lora // tp, h)  # wo_b
    if ratio:
        total += _compressor(model, d, ratio)
    if ratio == 4:
        index_heads, index_dim = s["index_n_heads"], s["index_head_dim"]
        total += _linear(model, q_lora, index_heads * index_dim)  # indexer.wq_b, replicated
        total += h * index_heads * 2  # weights_proj, bf16
        total += _compressor(model, index_dim, 4)
    experts, inter = s["n_routed_experts"], s["moe_intermediate_size"]
    total += h * experts * dtype_bytes  # gate
    if index < s["num_hash_layers"]:
        top_k = model.raw_config.get("num_experts_per_tok")
        total += s["vocab_size"] * (top_k if isinstance(top_k, int) else 0) * 4  # tid2eid
    elif model.raw_config.get("topk_method") == "noaux_tc":
        total += experts * 4  # e_score_correction_bias
    shared = inter * s["n_shared_experts"] // tp
    if shared:
        total += _linear(model, h, 2 * shared) + _linear(model, shared, h)
    # float32 fp8 block scales or MXFP4's e8m0 bytes, as vLLM's (module doc)
    return total + dsv4_routed_experts(model, experts, inter // tp, h)


def _rope_bytes(model: ModelSpec, s: dict[str, int], ratios: list[int]) -> int:
    """The stage's ``freqs_cis`` tables and ``cos_sin_cache`` buffers (module doc)."""
    raw = model.raw_config
    max_pos, rope_dim = s["max_position_embeddings"], s["qk_rope_head_dim"]
    scaling = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    scaling = scaling if isinstance(scaling, dict) else {}
    total = 0
    if any(r == 0 for r in ratios):
        total += 2 * max_pos * rope_dim * 4  # freqs_cis (complex64, dim / 2) + cos_sin_cache
    if any(r for r in ratios):
        factor = float(scaling.get("factor", 1.0))
        original = int(scaling.get("original_max_position_embeddings", max_pos))
        total += max_pos * rope_dim * 4 + int(original * factor) * rope_dim * 4
    return total


def sglang_dsv4_stage_bytes(
    model: ModelSpec, *, tp: int, pp: int, split: PpSplit
) -> tuple[int, ...]:
    """Each pipeline stage's bytes on one GPU (module doc); call :func:`sglang_dsv4_unpriced`
    first."""
    s = dsv4_target_sizes(model)
    assert s is not None
    ratios = _ratios(model, s["num_hidden_layers"])
    assert ratios is not None
    h, dtype_bytes, hc = s["hidden_size"], model.dtype_bytes or 2, s["hc_mult"]
    vocab_rank = cdiv(cdiv(s["vocab_size"], VOCAB_PADDING) * VOCAB_PADDING, tp)
    stages = []
    for p in range(pp):
        start, end = split(s["num_hidden_layers"], p, pp)
        total = sum(_layer(model, s, i, ratios[i], tp) for i in range(start, end))
        total += _rope_bytes(model, s, ratios[start:end])
        if p == 0:
            total += vocab_rank * h * dtype_bytes  # embed_tokens
        if p == pp - 1:  # lm_head, norm, hc_head_*
            total += vocab_rank * h * dtype_bytes + h * dtype_bytes
            total += (hc * hc * h + hc + 1) * 4
        stages.append(total)
    return tuple(stages)


def sglang_dsv4_nextn_bytes(model: ModelSpec, *, tp: int) -> int:
    """The NextN drafter's layer, projections, norms, ``hc_head`` and rotary tables on one GPU
    (``models/deepseek_v4_nextn.py`` lines 74-122), its embedding and head aside: ``enorm``,
    ``hnorm``, ``shared_head.norm``; fp8 ``e_proj`` / ``h_proj`` (``hidden x hidden``,
    replicated); fp32 ``hc_head_*``; one decoder layer at ratio 0 built as the target's, never a
    hash layer (``models/deepseek_v2.py`` line 712: not for a V4 NextN layer); and, when no target
    layer has ratio 0 (Pro), its own ratio-0 ``freqs_cis`` and ``cos_sin_cache``. Call
    :func:`sglang_dsv4_unpriced` first."""
    s = dsv4_target_sizes(model)
    ratios = _ratios(model, s["num_hidden_layers"]) if s is not None else None
    assert s is not None and ratios is not None
    h, hc, dtype_bytes = s["hidden_size"], s["hc_mult"], model.dtype_bytes or 2
    total = _layer(model, s, s["num_hash_layers"], 0, tp)
    total += 2 * _linear(model, h, h) + 3 * h * dtype_bytes + (hc * hc * h + hc + 1) * 4
    if 0 not in ratios:
        total += _rope_bytes(model, s, [0])
    return total


def sglang_dsv4_weights(
    weights: WeightsEstimate,
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    split: PpSplit,
    compute_capability_major: int | None,
) -> WeightsEstimate:
    """``weights`` with DeepSeek-V4's target as SGLang 0.5.23 builds it: a count from the
    architecture replaced by :func:`sglang_dsv4_stage_bytes`; a snapshot's total split by its
    shares, plus each stage's rotary tables; an engine log's figure kept. Where
    :func:`sglang_dsv4_unpriced` names a part, the generic count stays, said in a note."""
    if weights.source == "flag":
        return weights
    part = sglang_dsv4_unpriced(model, tp=tp, compute_capability_major=compute_capability_major)
    if part is not None:  # the generic count stays, as before SGLang's modules were read
        note = (
            f"DeepSeek-V4's target weights are the generic fp8 count, not SGLang's: {part}; pass "
            "--weights-bytes (the engine log's 'Load weight end. ... mem usage=X GB')"
        )
        return replace(weights, notes=(*weights.notes, note))
    weights = without_count_notes(weights)  # every module is priced here
    stages = sglang_dsv4_stage_bytes(model, tp=tp, pp=pp, split=split)
    s = dsv4_target_sizes(model)
    ratios = _ratios(model, s["num_hidden_layers"]) if s is not None else None
    assert s is not None and ratios is not None
    tables = [
        _rope_bytes(model, s, ratios[slice(*split(s["num_hidden_layers"], p, pp))])
        for p in range(pp)
    ]
    # the whole model's parameters (one GPU, no rotary tables): a snapshot's shares, the total
    whole = sglang_dsv4_stage_bytes(model, tp=1, pp=1, split=split)[0] - _rope_bytes(
        model, s, ratios
    )
    if not model.quantization_config:
        kind = "model dtype throughout"
    elif dsv4_expert_dtype(model) == "fp8":
        kind = "fp8 linears and routed experts with fp32 block scales"
    else:
        kind = "fp8 linears with fp32 block scales, MXFP4 routed experts with e8m0 scales"
    if weights.source == "read":
        per_rank = tuple(
            int(weights.total_bytes * (b - t) / whole) + t
            for b, t in zip(stages, tables, strict=True)
        )
        method = (
            f"{weights.method}; split by DeepSeek-V4's shares as SGLang 0.5.23 builds it "
            f"({kind}); + {tables[-1]:,} B of fp32 freqs_cis and cos_sin_cache rotary tables on "
            "the last stage"
        )
        return replace(weights, per_rank_bytes=per_rank, method=method)
    method = (
        f"DeepSeek-V4 as SGLang 0.5.23 builds it, module by module ({kind}; "
        f"kvbudget.capacity.engines.sglang.dsv4_weights), {tables[-1]:,} B of fp32 freqs_cis "
        "and cos_sin_cache rotary tables on the last stage"
    )
    return replace(
        weights, per_rank_bytes=stages, source="computed", method=method, total_bytes=whole
    )
