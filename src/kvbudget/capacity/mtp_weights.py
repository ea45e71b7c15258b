"""One GPU's bytes of the MiMo-V2-Flash, MiniMax-M3 and DeepSeek-V4 MTP drafters, module by module
as vLLM 0.32 builds them (``site-packages/vllm``); :mod:`kvbudget.capacity.mtp_draft` adds them to
the plan.

Each linear's weight is one rank's shard in the checkpoint's quantization
(:func:`kvbudget.capacity.weight_matrices._matrix_bytes`: fp8 blocks, AWQ / GPTQ, ...) unless
vLLM builds it without ``quant_config``; norms and biases are in the model dtype unless noted.
The embedding and the head are the target's (the proposer shares them with an MTP drafter,
``v1/spec_decode/llm_base_proposer.py`` lines 1466-1472, 1545-1556).

* MiMo-V2-Flash, one layer (``model_executor/models/mimo_v2_mtp.py`` lines 57-119, 177):
  ``enorm``, ``hnorm``, ``input_layernorm``, ``pre_mlp_layernorm``, ``final_layernorm`` (hidden
  each); ``eh_proj`` a ``ReplicatedLinear(2 x hidden, hidden)`` without ``quant_config`` (lines
  75-77); a sliding ``MiMoV2Attention`` (``mimo_v2.py`` lines 218-300) of
  ``swa_num_attention_heads``: the merged ``qkv_proj`` (KV heads replicated below one per rank),
  ``o_proj`` without ``quant_config`` under ``mtp.layers`` (line 277), with
  ``add_swa_attention_sink_bias`` one sink per local head (line 293); a dense ``MiMoV2MLP`` of
  ``intermediate_size`` (lines 77-101).
* MiniMax-M3, per module (``models/minimax_m3/nvidia/mtp.py`` lines 42-67): ``enorm``,
  ``hnorm``, ``final_layernorm`` (hidden each), ``eh_proj`` a ``ReplicatedLinear(2 x hidden,
  hidden)`` with the checkpoint's ``quant_config``, and a ``MiniMaxM3DecoderLayer`` forced sparse
  and MoE (``models/minimax_m3/nvidia/model.py`` lines 678-763): ``input_layernorm`` and
  ``post_attention_layernorm``; ``MiniMaxM3SparseAttention`` (lines 392-490) with one fused
  ``qkv_proj`` of ``[q | k | v | index_q | index_k]`` per rank (``model_executor/layers/linear.py``
  lines 1352-1420: index_q has one head per local KV head, index_k one head on every rank),
  ``o_proj`` row-split, and four head-size norms (``q_norm``, ``k_norm``, ``index_q_norm``,
  ``index_k_norm``); ``MiniMaxM3MoE`` (lines 195-270): the router ``GateLinear`` in fp32,
  ``e_score_correction_bias`` (fp32, one per expert) when ``use_routing_bias``,
  ``num_local_experts`` experts of ``intermediate_size`` (gate_up and down, split over the
  experts' ranks) and, with ``n_shared_experts``, a shared ``MiniMaxM3MLP`` of ``intermediate_size
  x n_shared_experts``.
* DeepSeek-V4, per layer (``models/deepseek_v4/nvidia/mtp.py`` lines 83-148), for checkpoints
  vLLM reads as ``DeepseekV4FP8Config`` (fp8 blocks of 128 x 128, ``expert_dtype`` fp4 without
  ``moe_quant_algo``, or fp8: ``models/deepseek_v4/quant_config.py`` lines 29-199): ``enorm``,
  ``hnorm``, ``shared_head.norm``; ``e_proj`` and ``h_proj`` ``ReplicatedLinear(hidden, hidden)``
  in fp8 with one scale per block, float8_e8m0fnu for fp4 experts and float32 for fp8 ones
  (``quantization/fp8.py`` line 336, ``is_scale_e8m0``); ``hc_head_fn`` ``(hc_mult, hc_mult x
  hidden)``, ``hc_head_base`` ``(hc_mult)``, ``hc_head_scale`` ``(1)`` in fp32; a ``DeepseekV4DecoderLayer``
  (``nvidia/model.py`` lines 1061-1141): two norms, ``hc_{attn,ffn}_fn`` ``((2 + hc_mult) x
  hc_mult, hc_mult x hidden)``, ``_base`` and 3-element ``_scale`` in fp32; its attention at
  compress ratio 1 (``attention.py`` lines 232-284: no compressor, no indexer) with the fp32
  ``attn_sink`` padded to the backend's head count, ``fused_wqa_wkv`` (whole), ``wq_b`` and
  ``wo_a`` (column-split), ``wo_b`` (row-split), ``q_norm`` and ``kv_norm``; its
  ``DeepseekV4MoE`` (lines 661-896): the bf16 gate, the fp32 ``e_score_correction_bias``, the
  fp8 shared expert (intermediate padded to whole 128-blocks per rank) and the routed experts,
  MXFP4 or (``expert_dtype`` fp8) fp8 blocks with float32 scales (``Fp8MoEMethod``).
  What is not counted: the re-layouts after loading (DeepGEMM turns each fp8 linear's e8m0 scales
  into its own layout, fp32 on Hopper: at most 3 B more per 128 x 128 block; the MoE backend
  shuffles or swizzles the experts), as for the target.
"""

from __future__ import annotations

from kvbudget.capacity.dsv4_modules import (
    DSV4_EXPERT_DTYPES,
    DSV4_FP8_BLOCK,
    dsv4_expert_dtype,
    dsv4_fp8_linear_bytes,
    dsv4_fp8_read,
    dsv4_padded_heads,
    dsv4_routed_experts,
    dsv4_scale_bytes,
    dsv4_sizes,
    positive_int,
)
from kvbudget.capacity.weight_matrices import Matrix, _matrix_bytes
from kvbudget.spec.layers import FullAttention, LayerSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

__all__ = [
    "deepseek_v4_hidden_buffer_bytes_per_token",
    "deepseek_v4_mtp_bytes",
    "deepseek_v4_mtp_rope_bytes",
    "deepseek_v4_mtp_unpriced",
    "mimo_v2_mtp_bytes",
    "minimax_m3_mtp_bytes",
]


def mimo_v2_mtp_bytes(model: ModelSpec, swa: LayerSpec, tp: int) -> int | None:
    """MiMo-V2-Flash's one MTP layer on one GPU of ``tp`` (module doc); ``swa`` is the drafter's
    sliding layer (:func:`kvbudget.spec.mtp.vllm_mtp_layers`). None when the config lacks a size."""
    raw = model.raw_config
    heads = positive_int(raw.get("swa_num_attention_heads"))
    inter = positive_int(model.intermediate_size)
    h = model.hidden_size or 0
    if not isinstance(swa, FullAttention) or heads is None or inter is None or not h:
        return None
    dtype_bytes, quant = model.dtype_bytes or 2, model.quantization_config
    local_heads = heads // tp
    kv_heads = max(1, swa.num_kv_heads // tp)
    qkv_out = local_heads * swa.head_dim + kv_heads * (swa.head_dim + swa.v_dim)
    mats = (
        (Matrix("qkv_proj", h, qkv_out), (h, qkv_out), quant),
        (Matrix("o_proj", heads * swa.v_dim, h), (local_heads * swa.v_dim, h), None),
        (Matrix("gate_up_proj", h, 2 * inter), (h, 2 * (inter // tp)), quant),
        (Matrix("down_proj", inter, h), (inter // tp, h), quant),
        (Matrix("eh_proj", 2 * h, h), (2 * h, h), None),
    )
    total = sum(_matrix_bytes(m, shape, q, dtype_bytes) for m, shape, q in mats)
    sinks = local_heads if raw.get("add_swa_attention_sink_bias") else 0
    return total + (5 * h + sinks) * dtype_bytes


def minimax_m3_mtp_bytes(model: ModelSpec, *, tp: int, moe_ranks: int) -> int | None:
    """One MiniMax-M3 MTP module on one GPU of ``tp`` (routed experts over ``moe_ranks``; module
    doc). None when the config lacks a size."""
    raw = model.raw_config
    sparse = raw.get("sparse_attention_config")
    sparse = sparse if isinstance(sparse, dict) else {}
    h = positive_int(model.hidden_size)
    heads = positive_int(raw.get("num_attention_heads"))
    kv = positive_int(raw.get("num_key_value_heads"))
    head_dim = positive_int(raw.get("head_dim"))
    index_dim = positive_int(sparse.get("sparse_index_dim"))
    experts = positive_int(raw.get("num_local_experts"))
    inter = positive_int(raw.get("intermediate_size"))
    if None in (h, heads, kv, head_dim, index_dim, experts, inter):
        return None
    assert h and heads and kv and head_dim and index_dim and experts and inter
    shared = positive_int(raw.get("n_shared_experts")) or 0
    dtype_bytes, quant = model.dtype_bytes or 2, model.quantization_config
    local_kv = max(1, kv // tp)
    qkv_out = (heads // tp) * head_dim + 2 * local_kv * head_dim + local_kv * index_dim + index_dim
    mats = [
        (Matrix("eh_proj", 2 * h, h), (2 * h, h)),
        (Matrix("qkv_proj", h, qkv_out), (h, qkv_out)),
        (Matrix("o_proj", heads * head_dim, h), (heads // tp * head_dim, h)),
    ]
    if shared:
        mats.append(
            (Matrix("shared.gate_up", h, 2 * inter * shared), (h, 2 * (inter * shared // tp)))
        )
        mats.append((Matrix("shared.down", inter * shared, h), (inter * shared // tp, h)))
    total = sum(_matrix_bytes(m, shape, quant, dtype_bytes) for m, shape in mats)
    gate_up = Matrix("experts.gate_up", h, 2 * inter, expert=True)
    down = Matrix("experts.down", inter, h, expert=True)
    total += experts * _matrix_bytes(gate_up, (h, 2 * (inter // moe_ranks)), quant, dtype_bytes)
    total += experts * _matrix_bytes(down, (inter // moe_ranks, h), quant, dtype_bytes)
    total += h * experts * 4  # the fp32 router
    total += experts * 4 if raw.get("use_routing_bias") else 0
    norms = 3 * h + 2 * h + 2 * head_dim + 2 * index_dim
    return total + norms * dtype_bytes


# --- DeepSeek-V4 (vLLM 0.32.0 ``models/deepseek_v4``) ---------------------------------------


def deepseek_v4_mtp_unpriced(model: ModelSpec, *, tp: int, moe_ranks: int) -> str | None:
    """The part of DeepSeek-V4's MTP drafter vLLM 0.32 builds in a way kvbudget cannot pin down
    for this config (one line), or None when :func:`deepseek_v4_mtp_bytes` prices all of it."""
    quant = model.quantization_config or {}
    if dsv4_sizes(model) is None:
        return "a size the drafter's modules need (hidden_size, hc_mult, o_groups, ...) is missing"
    if quant.get("moe_quant_algo") and dsv4_fp8_read(quant) and dsv4_expert_dtype(model) == "fp4":
        return (
            "its routed experts: with quantization_config.moe_quant_algo "
            f"{quant['moe_quant_algo']!r} vLLM 0.32 builds every routed-expert layer, the "
            "drafter's too, as ModelOptNvFp4FusedMoE (models/deepseek_v4/quant_config.py lines "
            "186-195; Fp8Config.from_config reads ignored_layers / modules_to_not_convert, not the "
            "checkpoint's ignore list that names mtp.*, quantization/fp8.py lines 159-175), while "
            "the checkpoint leaves mtp.* out of NVFP4: what loads there is not pinned down"
        )
    return deepseek_v4_linear_unpriced(model, tp=tp, moe_ranks=moe_ranks)


def deepseek_v4_linear_unpriced(model: ModelSpec, *, tp: int, moe_ranks: int) -> str | None:
    """What of a DeepSeek-V4 decoder layer under ``DeepseekV4FP8Config`` (linears, experts,
    attention split) kvbudget does not price for this config and split, in one line, or None;
    the drafter (:func:`deepseek_v4_mtp_unpriced`) and the target
    (:mod:`kvbudget.capacity.weights_dsv4`) share it."""
    raw = model.raw_config
    quant = model.quantization_config or {}
    sizes = dsv4_sizes(model)
    if sizes is None:
        return "a size the decoder layers need (hidden_size, hc_mult, o_groups, ...) is missing"
    if not dsv4_fp8_read(quant):
        return (
            "its linears' quantization: vLLM's DeepseekV4FP8Config (fp8 blocks of 128 x 128, "
            "models/deepseek_v4/quant_config.py lines 149-157) is the only one read"
        )
    expert_dtype = dsv4_expert_dtype(model)
    if expert_dtype not in DSV4_EXPERT_DTYPES:
        return (
            f"expert_dtype {raw.get('expert_dtype')!r}, which vLLM 0.32 refuses: 'Unsupported "
            f"DeepSeek V4 expert_dtype={raw.get('expert_dtype')!r}; expected one of "
            f"{DSV4_EXPERT_DTYPES}.' (models/deepseek_v4/quant_config.py lines 66-71)"
        )
    nested = quant.get("expert_dtype")
    if nested is not None and nested != expert_dtype:
        return (
            f"expert_dtype: quantization_config says {nested!r}, the config's top level "
            f"{expert_dtype!r}; vLLM 0.32 reads only the top level for deepseek_v4 "
            "(models/deepseek_v4/quant_config.py lines 57-78; transformers_utils/configs/"
            "deepseek_v4.py does not lift it, unlike deepseek_v41.py lines 46-50), so the "
            "experts it builds would not match the checkpoint; set expert_dtype at the top level"
        )
    heads, h = sizes["num_attention_heads"], sizes["hidden_size"]
    if heads % tp or sizes["o_groups"] % tp or heads // tp > 128:
        return (
            f"its attention at TP {tp}: {heads} heads / {sizes['o_groups']} output groups do not "
            "split into at most 128 heads per rank (models/deepseek_v4/attention.py lines "
            "211-220; nvidia/flashmla.py lines 78-85)"
        )
    inter = sizes["moe_intermediate_size"]
    if expert_dtype == "fp8" and (inter % moe_ranks or (inter // moe_ranks) % DSV4_FP8_BLOCK):
        return (
            f"its fp8 experts' blocks: {inter} intermediate rows over {moe_ranks} rank(s) is no "
            "whole number of 128-row blocks per rank, which Fp8MoEMethod refines to finer scale "
            "blocks or pads to whole blocks by MoE backend (model_executor/layers/fused_moe/"
            "oracle/fp8.py lines 288-386)"
        )
    if expert_dtype == "fp4" and (inter % moe_ranks or (inter // moe_ranks) % 128 or h % 256):
        return (
            f"its MXFP4 experts' padding: {inter // moe_ranks} intermediate rows per rank or "
            f"hidden {h} not a multiple of 128 / 256, which the MoE backend rounds up its own way "
            "(model_executor/layers/fused_moe/oracle/mxfp4.py lines 816-896)"
        )
    if inter * sizes["n_shared_experts"] % DSV4_FP8_BLOCK:
        return (
            "its shared expert: an intermediate size that is no multiple of 128 "
            "(DeepseekV4MLP pads it per rank, models/deepseek_v4/nvidia/model.py lines 152-159)"
        )
    return None


def deepseek_v4_mtp_bytes(
    model: ModelSpec, *, tp: int, moe_ranks: int, compute_capability_major: int | None = None
) -> int:
    """One DeepSeek-V4 MTP layer on one GPU of ``tp`` (routed experts over ``moe_ranks``), as
    vLLM 0.32 builds it (module doc of :mod:`kvbudget.capacity.mtp_draft`); call
    :func:`deepseek_v4_mtp_unpriced` first."""
    s = dsv4_sizes(model)
    assert s is not None
    h, heads, d = s["hidden_size"], s["num_attention_heads"], s["head_dim"]
    q_lora, o_lora, groups = s["q_lora_rank"], s["o_lora_rank"], s["o_groups"]
    hc_dim = s["hc_mult"] * h
    mix = (2 + s["hc_mult"]) * s["hc_mult"]
    dtype_bytes = model.dtype_bytes or 2
    # fp4 experts' checkpoints keep the fp8 linears' scales in e8m0, fp8 ones in fp32
    # (quant_config.py lines 80-84)
    scale = dsv4_scale_bytes(model)
    total = 3 * h * dtype_bytes  # enorm, hnorm, shared_head.norm (mtp.py lines 102-103, 140)
    total += 2 * dsv4_fp8_linear_bytes(h, h, scale)  # e_proj, h_proj (mtp.py lines 107-122)
    total += (s["hc_mult"] * hc_dim + s["hc_mult"] + 1) * 4  # hc_head_* (mtp.py lines 127-138)
    # the decoder layer (nvidia/model.py lines 1091-1141): two norms, the mHC parameters in fp32
    total += 2 * h * dtype_bytes + 2 * (mix * hc_dim + mix + 3) * 4
    # its attention at compress ratio 1 (attention.py lines 232-284): no compressor, no indexer
    total += dsv4_padded_heads(heads // tp, compute_capability_major) * 4  # attn_sink, fp32
    total += dsv4_fp8_linear_bytes(h, q_lora + d, scale)  # fused_wqa_wkv, replicated
    total += (q_lora + d) * dtype_bytes  # q_norm, kv_norm
    total += dsv4_fp8_linear_bytes(q_lora, heads * d // tp, scale)  # wq_b, column-split
    total += dsv4_fp8_linear_bytes(
        heads * d // groups, groups * o_lora // tp, scale
    )  # wo_a, column-split
    total += dsv4_fp8_linear_bytes(groups * o_lora // tp, h, scale)  # wo_b, row-split
    # DeepseekV4MoE (nvidia/model.py lines 724-795): the bf16 gate, the fp32 routing bias
    experts, inter = s["n_routed_experts"], s["moe_intermediate_size"]
    total += h * experts * dtype_bytes
    if model.raw_config.get("topk_method") == "noaux_tc":
        total += experts * 4
    # the shared DeepseekV4MLP (lines 133-176, 776-790): its intermediate size in whole 128-blocks
    # per rank, rounded up (lines 152-159)
    shared = cdiv(inter * s["n_shared_experts"] // DSV4_FP8_BLOCK, tp) * DSV4_FP8_BLOCK
    if shared:
        total += dsv4_fp8_linear_bytes(h, 2 * shared, scale) + dsv4_fp8_linear_bytes(
            shared, h, scale
        )
    # the routed experts: MXFP4 or fp8 blocks by expert_dtype (quant_config.py lines 186-199)
    return total + dsv4_routed_experts(model, experts, inter // moe_ranks, h)


def deepseek_v4_mtp_rope_bytes(model: ModelSpec) -> int:
    """The drafter's own fp32 rotary cache: its compress-ratio-1 attention's ``get_rope`` key
    (``models/deepseek_v4/common/rope.py`` lines 38-51: theta ``rope_theta``, factor 1) is the target's sliding layers' one, so
    it is shared (``rotary_embedding/__init__.py`` lines 74-85) unless no target layer has
    compress ratio 0 or 1 (DeepSeek-V4-Pro); then ``max_position_embeddings x rope_dim`` fp32
    (``rotary_embedding/deepseek_scaling_rope.py`` lines 237-256, factor 1)."""
    raw = model.raw_config
    s = dsv4_sizes(model)
    ratios = raw.get("compress_ratios")
    if s is None or not isinstance(ratios, list):
        return 0
    if any(r in (0, 1) for r in ratios[: s["num_hidden_layers"]]):
        return 0
    return s["max_position_embeddings"] * s["qk_rope_head_dim"] * 4


def deepseek_v4_hidden_buffer_bytes_per_token(model: ModelSpec) -> int:
    """What the *target* allocates per ``max_num_batched_tokens`` when a drafter runs: vLLM 0.32's
    ``DeepseekV4Model`` keeps the pre-``hc_head`` residual for the MTP layer in
    ``_mtp_hidden_buffer``, ``(max_num_batched_tokens, hc_mult x hidden)`` in the model dtype,
    only when ``speculative_config.use_eagle()`` (method ``mtp`` among them:
    ``config/speculative.py`` line 1948), built with the model (``nvidia/model.py`` lines
    1378-1389), so it is in "Model loading took"."""
    s = dsv4_sizes(model)
    return 0 if s is None else s["hc_mult"] * s["hidden_size"] * (model.dtype_bytes or 2)
