"""DeepSeek-V4's target model on one GPU as vLLM 0.32 builds it: every parameter and persistent
buffer, per pipeline stage (``site-packages/vllm/models/deepseek_v4``; line numbers are 0.32.0's).

The generic count (:mod:`kvbudget.capacity.weights`) prices DeepSeek-V4 as fp8 everywhere with
fp32 block scales; vLLM reads the fp8 checkpoints (``quant_method`` ``fp8``, blocks of 128 x 128)
as ``DeepseekV4FP8Config`` (``models/deepseek_v4/quant_config.py`` lines 139-157) and builds:

* each fp8 linear as the e4m3 weight and one scale per 128 x 128 block, the scale a 1-byte
  float8_e8m0fnu when ``expert_dtype`` is fp4, a float32 when it is fp8 (DeepSeek-V4-Flash-Base;
  ``is_scale_e8m0``, lines 80-84; ``quantization/fp8.py`` lines 312-339);
* the routed experts (``get_quant_method``, lines 178-199) with ``expert_dtype`` fp8 as fp8
  blocks (``Fp8MoEMethod``, ``quantization/fp8.py`` lines 538-662: e4m3 weights, one float32
  scale per 128 x 128 block; a rank's rows not a whole number of blocks are refused, the backend
  then refines or pads them, ``fused_moe/oracle/fp8.py`` lines 288-386); with fp4 as MXFP4
  (``Mxfp4MoEMethod``,
  ``quantization/mxfp4.py`` lines 659-731: uint8 weights two values a byte and one uint8 scale
  per 32 inputs), or as ModelOpt NVFP4 when ``quantization_config.moe_quant_algo`` is NVFP4
  (the nvidia ``-NVFP4`` checkpoints; ``ModelOptNvFp4FusedMoE.create_weights``,
  ``quantization/modelopt.py`` lines 892-1006: uint8 weights two values a byte, one
  float8_e4m3fn scale per 16 inputs, fp32 ``weight_scale_2`` and ``input_scale`` per expert and
  shard; a FlashInfer backend under expert parallel keeps the input scales of all experts, at
  most 12 B per expert and layer more, not counted);
* an unquantized checkpoint (no ``quantization_config``) in the model dtype, the experts too.

Per decoder layer (``nvidia/model.py`` lines 1061-1141), compress ratio ``r = max(1,
compress_ratios[i])`` (``attention.py`` line 233):

* ``attn_norm``, ``ffn_norm`` (hidden); ``hc_{attn,ffn}_fn`` ``((2 + hc_mult) x hc_mult,
  hc_mult x hidden)``, ``_base`` ``((2 + hc_mult) x hc_mult)`` and ``_scale`` ``(3)``, fp32;
* attention (``attention.py`` lines 195-317): ``attn_sink`` fp32 padded to the backend's head
  count (FlashMLA 64 / 128, ``nvidia/flashmla.py`` lines 78-85); ``fused_wqa_wkv`` (hidden ->
  q_lora + head_dim, replicated); ``q_norm``, ``kv_norm``; ``wq_b`` (q_lora -> heads x head_dim)
  and ``wo_a`` (heads x head_dim / o_groups -> o_groups x o_lora) split by columns, ``wo_b``
  (o_groups x o_lora -> hidden) by rows;
* ``r > 1``: its ``DeepseekCompressor`` (``compressor.py`` lines 211-287, ``coff = 1 + (r ==
  4)``): ``ape`` ``(r, coff x head_dim)`` fp32, ``fused_wkv_wgate`` (hidden -> 2 x coff x
  head_dim) without ``quant_config`` (model dtype), ``norm`` (head_dim);
* ``r == 4``: the lightning indexer (``attention.py`` lines 298-317, 928-1031): ``wq_b``
  (q_lora -> index_n_heads x index_head_dim, replicated, quantized), ``weights_proj`` (hidden ->
  index_n_heads, no ``quant_config``) and its own compressor at ratio 4 on ``index_head_dim``;
* ``DeepseekV4MoE`` (``nvidia/model.py`` lines 661-896): the ``GateLinear`` router (hidden ->
  experts, model dtype); on the first ``num_hash_layers`` layers the hash table ``tid2eid``
  ``(vocab, num_experts_per_tok)`` int32 (lines 740-756), else with ``topk_method`` noaux_tc the
  fp32 ``e_score_correction_bias`` (lines 757-765); the shared ``DeepseekV4MLP`` (lines 133-176)
  of ``n_shared_experts x moe_intermediate_size``, padded per rank to whole 128-blocks with fp8
  blocks (lines 152-159); the routed experts split over the MoE ranks (whole experts with expert
  parallel, intermediate rows without: the same bytes).

Per stage (``DeepseekV4Model``, lines 1287-1389; ``DeepseekV4ForCausalLM`` lines 1818-1843):
the embedding on the first stage and the head plus the final norm on the last (vocab padded to
64 and split over TP, model dtype); on every stage the fp32 ``hc_head_fn`` ``(hc_mult, hc_mult x
hidden)``, ``hc_head_base`` and ``hc_head_scale``; the ``topk_indices_buffer``
``(max_num_batched_tokens, index_topk)`` int32 every indexer shares (lines 1323-1328); and one
fp32 rotary ``cos_sin_cache`` per distinct ``get_rope`` key of the stage's layers
(``common/rope.py`` lines 9-52; ``rotary_embedding/__init__.py`` lines 74-85, 284-312;
``deepseek_scaling_rope.py`` lines 224-255): ratio-1 layers ``max_position_embeddings x
qk_rope_head_dim`` (factor 1), compressed layers ``original_max_position_embeddings x factor x
qk_rope_head_dim`` with ``compress_rope_theta`` under a YaRN config, else factor 1.

Not counted: the re-layouts after loading (DeepGEMM's own scale layout, the MoE backend's
shuffles) and the attention backends' metadata buffers (built with the KV cache, after the
profile), as for the MTP drafter (:mod:`kvbudget.capacity.mtp_weights`). Sequence parallel
(expert parallel with TP > 1 and data parallel, which replicates the shared expert,
``nvidia/model.py`` lines 1047-1058) is not modelled: kvbudget has no expert-parallel flag.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvbudget.capacity.dsv4_modules import (
    DSV4_FP8_BLOCK,
    dsv4_expert_dtype,
    dsv4_fp8_linear_bytes,
    dsv4_padded_heads,
    dsv4_routed_experts,
    dsv4_scale_bytes,
    dsv4_target_sizes,
    positive_int,
)
from kvbudget.capacity.layouts.base import get_pp_indices
from kvbudget.capacity.mtp_weights import deepseek_v4_linear_unpriced
from kvbudget.capacity.weights import WeightsEstimate, with_rope_cache, without_count_notes
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

__all__ = [
    "NVFP4_GROUP",
    "deepseek_v4_rope_bytes",
    "deepseek_v4_target_stage_bytes",
    "deepseek_v4_target_unpriced",
    "deepseek_v4_weights",
]

#: ``DeepseekV4FP8Config._get_nvfp4_config`` (``quant_config.py`` line 112: ``group_size=16``)
NVFP4_GROUP = 16
#: ``VocabParallelEmbedding``'s ``DEFAULT_VOCAB_PADDING_SIZE``
VOCAB_PADDING = 64


def _ratios(model: ModelSpec, num_layers: int) -> list[int] | None:
    ratios = model.raw_config.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < num_layers:
        return None
    if not all(isinstance(r, int) and r in (0, 1, 4, 128) for r in ratios[:num_layers]):
        return None
    return [max(1, r) for r in ratios[:num_layers]]


def _nvfp4_experts(model: ModelSpec) -> bool:
    quant = model.quantization_config or {}
    nvfp4 = str(quant.get("moe_quant_algo") or "").upper() == "NVFP4"
    return nvfp4 and dsv4_expert_dtype(model) == "fp4"  # quant_config.py lines 186-199


def deepseek_v4_target_unpriced(model: ModelSpec, *, tp: int, moe_ranks: int) -> str | None:
    """The part of DeepSeek-V4's target vLLM 0.32 builds in a way this module does not price
    (one line), or None when :func:`deepseek_v4_target_stage_bytes` prices all of it."""
    sizes = dsv4_target_sizes(model)
    if sizes is None:
        return (
            "a size its modules need (hidden_size, hc_mult, o_groups, index_topk, vocab_size, "
            "...) is missing"
        )
    if _ratios(model, sizes["num_hidden_layers"]) is None:
        return (
            "compress_ratios: one per layer of 0, 1, 4 or 128 is needed "
            "(models/deepseek_v4/attention.py lines 232-235, compressor.py lines 168-173)"
        )
    if model.quantization_config:
        return deepseek_v4_linear_unpriced(model, tp=tp, moe_ranks=moe_ranks)
    heads, groups = sizes["num_attention_heads"], sizes["o_groups"]
    if heads % tp or groups % tp or sizes["moe_intermediate_size"] % moe_ranks:
        return (
            f"its split at TP {tp}: {heads} heads, {groups} output groups or "
            f"{sizes['moe_intermediate_size']} expert rows do not divide evenly "
            "(models/deepseek_v4/attention.py lines 211-220)"
        )
    return None


def _linear(model: ModelSpec, n_in: int, n_out: int) -> int:
    """One rank's ``n_in x n_out`` linear built with the checkpoint's ``quant_config``."""
    if not model.quantization_config:
        return n_in * n_out * (model.dtype_bytes or 2)
    return dsv4_fp8_linear_bytes(
        n_in, n_out, dsv4_scale_bytes(model)
    )  # e8m0 or fp32 scales (module doc)


def _compressor(model: ModelSpec, head_dim: int, ratio: int) -> int:
    """``DeepseekCompressor`` (``compressor.py`` lines 239-280)."""
    h, dtype_bytes = model.hidden_size or 0, model.dtype_bytes or 2
    coff = 1 + (ratio == 4)
    return ratio * coff * head_dim * 4 + (h * 2 * coff * head_dim + head_dim) * dtype_bytes


def _experts(model: ModelSpec, experts: int, rows: int, h: int) -> int:
    """``experts`` routed experts of ``rows`` intermediate rows each on one rank (module doc)."""
    if model.quantization_config and _nvfp4_experts(model):
        w13 = 2 * rows * (h // 2 + h // NVFP4_GROUP)
        w2 = h * (rows // 2 + rows // NVFP4_GROUP)
        return experts * (w13 + w2 + (2 + 1) * 4 + (2 + 1) * 4)  # weight_scale_2, input_scale
    return dsv4_routed_experts(model, experts, rows, h)  # model dtype, MXFP4 or fp8 blocks


def _layer_bytes(
    model: ModelSpec,
    s: dict[str, int],
    index: int,
    ratio: int,
    *,
    tp: int,
    moe_ranks: int,
    compute_capability_major: int | None,
) -> int:
    """Decoder layer ``index`` on one rank (module doc)."""
    h, heads, d = s["hidden_size"], s["num_attention_heads"], s["head_dim"]
    q_lora, o_lora, groups = s["q_lora_rank"], s["o_lora_rank"], s["o_groups"]
    dtype_bytes = model.dtype_bytes or 2
    hc_dim, mix = s["hc_mult"] * h, (2 + s["hc_mult"]) * s["hc_mult"]
    total = 2 * h * dtype_bytes + 2 * (mix * hc_dim + mix + 3) * 4
    total += dsv4_padded_heads(heads // tp, compute_capability_major) * 4  # attn_sink
    total += _linear(model, h, q_lora + d)  # fused_wqa_wkv
    total += (q_lora + d) * dtype_bytes  # q_norm, kv_norm
    total += _linear(model, q_lora, heads * d // tp)  # wq_b
    total += _linear(model, heads * d // groups, groups * o_lora // tp)  # wo_a
    total += _linear(model, groups * o_lora // tp, h)  # wo_b
    if ratio > 1:
        total += _compressor(model, d, ratio)
    if ratio == 4:
        index_heads, index_dim = s["index_n_heads"], s["index_head_dim"]
        total += _linear(model, q_lora, index_heads * index_dim)  # indexer.wq_b
        total += h * index_heads * dtype_bytes  # indexer.weights_proj
        total += _compressor(model, index_dim, 4)
    experts, inter = s["n_routed_experts"], s["moe_intermediate_size"]
    total += h * experts * dtype_bytes  # gate
    if index < s["num_hash_layers"]:
        top_k = positive_int(model.raw_config.get("num_experts_per_tok")) or 0
        total += s["vocab_size"] * top_k * 4  # tid2eid, int32
    elif model.raw_config.get("topk_method") == "noaux_tc":
        total += experts * 4  # e_score_correction_bias
    shared = inter * s["n_shared_experts"]
    if shared and model.quantization_config:  # whole 128-blocks per rank (lines 152-159)
        per_rank = cdiv(shared // DSV4_FP8_BLOCK, tp) * DSV4_FP8_BLOCK
    else:
        per_rank = shared // tp
    if per_rank:
        total += _linear(model, h, 2 * per_rank) + _linear(model, per_rank, h)
    return total + _experts(model, experts, inter // moe_ranks, h)


def _rope_keys(model: ModelSpec, s: dict[str, int], ratios: list[int]) -> dict[Any, int]:
    """``get_rope`` key -> fp32 cache bytes for each distinct rotary embedding of ``ratios``'
    layers (``common/rope.py`` lines 17-51)."""
    raw = model.raw_config
    max_pos, rope_dim = s["max_position_embeddings"], s["qk_rope_head_dim"]
    scaling = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    scaling = scaling if isinstance(scaling, dict) else {}
    if isinstance(scaling.get("main"), dict) and isinstance(scaling.get("compress"), dict):
        scaling = scaling["compress"]
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    keys: dict[Any, int] = {}
    for ratio in set(ratios):
        factor, original = 1.0, max_pos
        if ratio > 1 and rope_type != "default":
            factor = float(scaling.get("factor", 1.0))
            original = int(scaling.get("original_max_position_embeddings", max_pos))
        theta = raw.get("compress_rope_theta") if ratio > 1 else raw.get("rope_theta")
        yarn = ratio > 1 and rope_type != "default"
        key = (theta, factor, original, yarn)
        # deepseek_scaling_rope.py lines 246-254: arange(original x factor) positions
        keys[key] = int(original * factor) * rope_dim * 4
    return keys


def deepseek_v4_rope_bytes(model: ModelSpec, layers: range) -> int:
    """The fp32 rotary caches of the target's ``layers`` (module doc)."""
    s = dsv4_target_sizes(model)
    ratios = None if s is None else _ratios(model, s["num_hidden_layers"])
    if s is None or ratios is None:
        return 0
    return sum(_rope_keys(model, s, [ratios[i] for i in layers]).values())


def deepseek_v4_target_stage_bytes(
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    moe_ranks: int,
    max_num_batched_tokens: int,
    compute_capability_major: int | None = None,
) -> tuple[int, ...]:
    """Each pipeline stage's bytes on one GPU (module doc); call
    :func:`deepseek_v4_target_unpriced` first."""
    s = dsv4_target_sizes(model)
    assert s is not None
    ratios = _ratios(model, s["num_hidden_layers"])
    assert ratios is not None
    h, dtype_bytes = s["hidden_size"], model.dtype_bytes or 2
    vocab_rank = cdiv(cdiv(s["vocab_size"], VOCAB_PADDING) * VOCAB_PADDING, tp)
    stages = []
    for p in range(pp):
        start, end = get_pp_indices(s["num_hidden_layers"], p, pp)
        total = sum(
            _layer_bytes(
                model,
                s,
                i,
                ratios[i],
                tp=tp,
                moe_ranks=moe_ranks,
                compute_capability_major=compute_capability_major,
            )
            for i in range(start, end)
        )
        total += (s["hc_mult"] * s["hc_mult"] * h + s["hc_mult"] + 1) * 4  # hc_head_*
        total += max_num_batched_tokens * s["index_topk"] * 4  # topk_indices_buffer
        total += deepseek_v4_rope_bytes(model, range(start, end))
        if p == 0:
            total += vocab_rank * h * dtype_bytes  # embed_tokens
        if p == pp - 1:
            total += vocab_rank * h * dtype_bytes + h * dtype_bytes  # lm_head, norm
        stages.append(total)
    return tuple(stages)


def _buffers(model: ModelSpec, layers: range, max_num_batched_tokens: int) -> int:
    """A stage's rotary caches and ``topk_indices_buffer`` (module doc)."""
    s = dsv4_target_sizes(model)
    assert s is not None
    return deepseek_v4_rope_bytes(model, layers) + max_num_batched_tokens * s["index_topk"] * 4


def deepseek_v4_weights(
    weights: WeightsEstimate,
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    moe_ranks: int,
    max_num_batched_tokens: int,
    compute_capability_major: int | None,
    measured: bool,
) -> WeightsEstimate:
    """``weights`` (:func:`kvbudget.capacity.weights.estimate_weights`) with DeepSeek-V4's
    target as vLLM builds it: a count from the architecture replaced by
    :func:`deepseek_v4_target_stage_bytes`; a snapshot's total split by its shares, plus each
    stage's buffers; an engine log's figure (``flag``) kept. A part
    :func:`deepseek_v4_target_unpriced` names is refused in one line unless ``measured`` (the
    pool is given: ``--kv-cache-memory``), when the generic count stays, said in a note."""
    if weights.source == "flag":
        return weights
    part = deepseek_v4_target_unpriced(model, tp=tp, moe_ranks=moe_ranks)
    if part is not None:
        if not measured:
            raise ConfigError(
                f"weights: DeepSeek-V4's target weights under vLLM are not priced: {part}; pass "
                "--weights-bytes from the engine log ('Model loading took X GiB') or "
                "--kv-cache-memory",
                field="weights_bytes",
            )
        note = f"DeepSeek-V4's target weights are the generic fp8 count, not vLLM's: {part}"
        return replace(with_rope_cache(weights, model), notes=(*weights.notes, note))
    weights = without_count_notes(weights)  # every module is priced here
    s = dsv4_target_sizes(model)
    assert s is not None
    stages = deepseek_v4_target_stage_bytes(
        model,
        tp=tp,
        pp=pp,
        moe_ranks=moe_ranks,
        max_num_batched_tokens=max_num_batched_tokens,
        compute_capability_major=compute_capability_major,
    )
    buffers = [
        _buffers(
            model, range(*get_pp_indices(s["num_hidden_layers"], p, pp)), max_num_batched_tokens
        )
        for p in range(pp)
    ]
    if not model.quantization_config:
        kind = "model dtype throughout"
    elif dsv4_expert_dtype(model) == "fp8":
        kind = "fp8 linears and routed experts with fp32 block scales"
    else:
        experts = "NVFP4" if _nvfp4_experts(model) else "MXFP4"
        kind = f"fp8 linears with e8m0 block scales, {experts} routed experts"
    said = (
        f"{buffers[-1]:,} B of buffers on the last stage (fp32 rotary caches; the "
        f"{max_num_batched_tokens} x {s['index_topk']} int32 topk_indices_buffer)"
    )
    # the whole model's parameters (one GPU, no buffers): a snapshot's shares, the plan's total
    whole = deepseek_v4_target_stage_bytes(
        model,
        tp=1,
        pp=1,
        moe_ranks=1,
        max_num_batched_tokens=0,
        compute_capability_major=compute_capability_major,
    )[0] - _buffers(model, range(s["num_hidden_layers"]), 0)
    if weights.source == "read":
        per_rank = tuple(
            int(weights.total_bytes * (b - f) / whole) + f
            for b, f in zip(stages, buffers, strict=True)
        )
        method = (
            f"{weights.method}; split by DeepSeek-V4's shares as vLLM 0.32 builds it ({kind}); "
            f"+ {said}"
        )
        return replace(weights, per_rank_bytes=per_rank, method=method)
    method = (
        f"DeepSeek-V4 as vLLM 0.32 builds it, module by module ({kind}; "
        f"kvbudget.capacity.weights_dsv4), {said}"
    )
    return replace(
        weights,
        per_rank_bytes=stages,
        source="computed",
        method=method,
        total_bytes=whole,
    )
