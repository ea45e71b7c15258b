"""DeepSeek-V4's module pricers that vLLM 0.32's target, its MTP drafter and SGLang 0.5.23's
DeepSeek-V4 share: the config's sizes, the fp8 block-linear, the routed experts (MXFP4 or fp8
blocks), ``expert_dtype`` and the scale bytes as the engines read them. Line numbers are vLLM
0.32.0's (``site-packages/vllm``) unless a docstring says otherwise; the module docs of
:mod:`kvbudget.capacity.weights_dsv4`, :mod:`kvbudget.capacity.mtp_weights` and
:mod:`kvbudget.capacity.engines.sglang.dsv4_weights` say where each is used.
"""

from __future__ import annotations

from typing import Any

from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

__all__ = [
    "DSV4_EXPERT_DTYPES",
    "DSV4_FP8_BLOCK",
    "MXFP4_GROUP",
    "dsv4_expert_dtype",
    "dsv4_fp8_linear_bytes",
    "dsv4_fp8_read",
    "dsv4_padded_heads",
    "dsv4_routed_experts",
    "dsv4_scale_bytes",
    "dsv4_sizes",
    "dsv4_target_sizes",
    "positive_int",
]

#: an fp8 linear's block (``weight_block_size``) the DeepSeek-V4 checkpoints ship
DSV4_FP8_BLOCK = 128
#: the MXFP4 experts' scale group (``Mxfp4MoEMethod.create_weights``, ``quantization/mxfp4.py``
#: line 671: ``mxfp4_block = 32``)
MXFP4_GROUP = 32
#: ``_DEEPSEEK_V4_EXPERT_DTYPES`` (``models/deepseek_v4/quant_config.py`` line 21)
DSV4_EXPERT_DTYPES = ("fp4", "fp8")


def positive_int(value: Any) -> int | None:
    """``value`` where it is a positive integer (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def dsv4_sizes(model: ModelSpec) -> dict[str, int] | None:
    """The config sizes every DeepSeek-V4 decoder layer needs (``n_shared_experts`` 0 when
    absent), or None where one is missing or not a positive integer."""
    raw = model.raw_config
    keys = (
        "hidden_size", "num_attention_heads", "head_dim", "q_lora_rank", "o_lora_rank",
        "o_groups", "moe_intermediate_size", "n_routed_experts", "hc_mult", "qk_rope_head_dim",
        "max_position_embeddings", "num_hidden_layers",
    )  # fmt: skip
    sizes = {k: positive_int(raw.get(k)) for k in keys}
    if any(v is None for v in sizes.values()):
        return None
    out = {k: v for k, v in sizes.items() if v is not None}
    out["n_shared_experts"] = positive_int(raw.get("n_shared_experts")) or 0
    return out


def dsv4_target_sizes(model: ModelSpec) -> dict[str, int] | None:
    """:func:`dsv4_sizes` plus what the target's layers need too (the indexer's sizes,
    ``vocab_size``, ``num_hash_layers``), or None where one is missing."""
    sizes = dsv4_sizes(model)
    raw = model.raw_config
    extra = {k: positive_int(raw.get(k)) for k in ("index_n_heads", "index_head_dim", "index_topk")}
    vocab = positive_int(model.vocab_size)
    if sizes is None or vocab is None or any(v is None for v in extra.values()):
        return None
    out = dict(sizes)
    out.update({k: v for k, v in extra.items() if v is not None})
    out["vocab_size"] = vocab
    hash_layers = raw.get("num_hash_layers", 0)
    out["num_hash_layers"] = hash_layers if isinstance(hash_layers, int) else 0
    return out


def dsv4_fp8_read(quant: dict[str, Any]) -> bool:
    """Whether vLLM reads ``quant`` as ``DeepseekV4FP8Config`` with 128 x 128 blocks."""
    method = str(quant.get("quant_method", "")).lower()
    block = quant.get("weight_block_size")
    return method in ("fp8", "deepseek_v4_fp8") and block == [DSV4_FP8_BLOCK, DSV4_FP8_BLOCK]


def dsv4_fp8_linear_bytes(n_in: int, n_out: int, scale_bytes: int) -> int:
    """One rank's fp8 linear ``n_in x n_out``: the e4m3 weight and one scale per 128 x 128 block
    (``Fp8LinearMethod.create_weights``, ``quantization/fp8.py`` lines 312-339;
    ``create_fp8_scale_parameter``, ``quantization/utils/fp8_utils.py`` lines 1412-1425)."""
    return n_in * n_out + scale_bytes * cdiv(n_out, DSV4_FP8_BLOCK) * cdiv(n_in, DSV4_FP8_BLOCK)


def dsv4_expert_dtype(model: ModelSpec) -> str:
    """``expert_dtype`` as vLLM 0.32 reads it for deepseek_v4: the config's top-level field, fp4
    when absent (``DeepseekV4FP8Config.expert_dtype``, ``models/deepseek_v4/quant_config.py``
    lines 57-78; ``nvidia/model.py`` line 1823)."""
    value = model.raw_config.get("expert_dtype", "fp4")
    return value if isinstance(value, str) else repr(value)


def dsv4_scale_bytes(model: ModelSpec) -> int:
    """Bytes of one fp8 linear's block scale: float8_e8m0fnu (1 B) for fp4-expert checkpoints,
    float32 (4 B) for fp8-expert ones (``is_scale_e8m0``, ``quant_config.py`` lines 80-84;
    ``quantization/fp8.py`` line 336; ``quantization/utils/fp8_utils.py`` line 1405)."""
    return 1 if dsv4_expert_dtype(model) == "fp4" else 4


def dsv4_routed_experts(model: ModelSpec, experts: int, rows: int, h: int) -> int:
    """``experts`` fp8-checkpoint routed experts of ``rows`` intermediate rows each on one rank:
    MXFP4 for ``expert_dtype`` fp4 (``Mxfp4MoEMethod.create_weights``, ``quantization/mxfp4.py``
    lines 659-731: uint8 weights two values a byte, one uint8 scale per 32 inputs), fp8 blocks
    for fp8 (``Fp8MoEMethod.create_weights``, ``quantization/fp8.py`` lines 538, 564-587,
    616-628: e4m3 ``w13_weight (E, 2I, H)`` and ``w2_weight (E, H, I)``, one float32
    ``weight_scale_inv`` per 128 x 128 block; no input scales, block quantization being dynamic,
    lines 646-662); ``rows`` in whole 128-blocks
    (:func:`kvbudget.capacity.mtp_weights.deepseek_v4_linear_unpriced`); without a
    ``quantization_config`` gate, up and down in the model dtype."""
    if not model.quantization_config:
        return experts * 3 * rows * h * (model.dtype_bytes or 2)
    if dsv4_expert_dtype(model) == "fp8":
        blocks_h, blocks_i = cdiv(h, DSV4_FP8_BLOCK), cdiv(rows, DSV4_FP8_BLOCK)
        w13 = 2 * rows * h + 4 * 2 * blocks_i * blocks_h
        w2 = h * rows + 4 * blocks_h * blocks_i
        return experts * (w13 + w2)
    w13 = 2 * rows * (h // 2 + h // MXFP4_GROUP)
    w2 = h * (rows // 2 + rows // MXFP4_GROUP)
    return experts * (w13 + w2)


def dsv4_padded_heads(local_heads: int, compute_capability_major: int | None) -> int:
    """The attention sink's padded head count (``attention.py`` lines 240-246): FlashMLA's 64 or
    128 (``nvidia/flashmla.py`` lines 78-85), FlashInfer's next of 8 ... 128 on compute capability
    12 (``nvidia/model.py`` lines 1042-1044; ``nvidia/flashinfer_sparse.py`` lines 78-88)."""
    if compute_capability_major == 12:
        return next(n for n in (8, 16, 32, 64, 128) if local_heads <= n)
    return 64 if local_heads <= 64 else 128
