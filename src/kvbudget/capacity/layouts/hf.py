"""Hugging Face transformers layout: what ``DynamicCache`` holds after a forward pass.

Source: ``transformers/cache_utils.py`` (5.x, read in this venv) and the models' modeling files:

* ``DynamicLayer`` (full attention): K and V ``[batch, kv_heads, seq, head_dim]``.
* ``DynamicSlidingWindowLayer``: keeps only the last ``sliding_window - 1`` tokens
  (``full_key_states[:, :, -self.sliding_window + 1:, :]``); chunked layers (Llama 4) use the
  same class with ``sliding_window = attention_chunk_size`` (``get_layer_types_and_kwargs``).
* MLA (DeepSeek-V2/V3, ``modeling_deepseek_v3.py``): the cache holds the normalised latent
  ``[batch, 1, seq, kv_lora_rank]`` as "keys" and the rotary key ``[batch, 1, seq, rope]`` as "values".
* ``LinearAttentionLayer`` (Mamba in Jamba, gated delta net in Qwen3-Next): a conv state
  ``[batch, channels, conv_kernel]`` in the model dtype and a recurrent state in float32
  (Mamba ``[batch, intermediate, d_state]``; GDN ``[batch, v_heads, k_dim, v_dim]``).
* ``MiniMaxCache.linear_cache``: ``[batch, heads, head_dim, head_dim]`` in the model dtype.
* KV-shared layers (Gemma-3n consumers) get a ``DummyLayer`` that stores nothing.
* ``LinearAttentionAndFullAttentionLayer`` (layer type ``"hybrid"``, Falcon-H1): one cache layer
  holding both a ``DynamicLayer``'s K/V and a ``LinearAttentionLayer``'s conv and recurrent
  states; its two parts are counted in the full and state groups under the same layer index.
* Inkling (``hybrid`` / ``hybrid_sliding``): a ``LinearAttentionAndFullAttentionLayer`` or
  ``LinearAttentionAndSlidingWindowAttentionLayer`` whose four conv states (K, V, attention and
  MLP inputs) are ``[batch, channels, conv_kernel]`` in float32 (``modeling_inkling.py``
  ``_keep_in_fp32_modules`` names the four ``*_sconv`` modules).
* DeepSeek-V4 compressed layers (``modeling_deepseek_v4.py``): ``DeepseekV4HCACache`` keeps the
  window's shared K=V head once (``self.values = self.keys``, lines 193-200) and, per entry
  name, ``compressed_kv`` (one ``head_dim`` entry per ``compress_rate`` tokens),
  ``buffer_kv`` / ``buffer_gate`` (the ``T % compress_rate`` tokens not yet compressed, lines
  216-223); ``DeepseekV4CSACache`` adds the ``"indexer"`` entry (``index_head_dim``), projects
  two series per token (``2 x head_dim`` in the buffers) and keeps the last window's first
  series as ``overlap_kv`` (model dtype) and ``overlap_gate`` (float32: the gate plus a float32
  ``position_bias``) once a window has closed (lines 285-299). Its sliding-only layers are a
  plain ``DynamicSlidingWindowLayer`` (K and V as two tensors).

Transformers runs in one process, so ``tp`` and ``pp`` must be 1 (``dp`` counts replicas).
"""

from __future__ import annotations

from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.layouts.base import GroupBytes, LayoutResult, StageBytes, check_load
from kvbudget.capacity.layouts.grouping import group_by_kind
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import (
    MLA,
    ChunkedLocal,
    CompressedAttention,
    CompressedSparseAttention,
    FullAttention,
    LayerSpec,
    SlidingWindow,
)
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer

FP32_BYTES = 4


def _kept(layer: LayerSpec, tokens: int) -> int:
    if isinstance(layer, SlidingWindow | CompressedAttention | MLA) and layer.sliding_window:
        return min(tokens, layer.sliding_window - 1)  # MLA: Dots3-Note's sliding layers
    if isinstance(layer, ChunkedLocal):
        return min(tokens, layer.attention_chunk_size - 1)
    if layer.kind in ("full", "mla"):
        return tokens
    return 0


def state_bytes_hf(layer: StateLayer, element_bytes: int) -> int:
    """One sequence's state as transformers stores it."""
    if layer.state_kind == "linear":
        return layer.ssm_elements() * element_bytes
    if layer.state_kind == "sconv_fp32":  # Inkling: conv weights and states kept in float32
        return layer.conv_channels() * layer.conv_kernel * FP32_BYTES
    conv = layer.conv_channels() * layer.conv_kernel * element_bytes
    aux = layer.aux_conv_elements() * element_bytes  # Qwen4-Exp's PLE short-conv state
    return conv + aux + layer.ssm_elements() * FP32_BYTES


def compressed_bytes_hf(layer: CompressedAttention, tokens: int, element_bytes: int) -> int:
    """One sequence's bytes in a DeepSeek-V4 HCA / CSA cache layer after ``tokens`` tokens."""
    rate = layer.compress_rate
    window = min(tokens, layer.sliding_window - 1) * layer.head_dim * element_bytes
    overlap = isinstance(layer, CompressedSparseAttention)
    series = 2 if overlap else 1
    branches = [layer.head_dim] + ([layer.index_head_dim] if overlap else [])
    total = window
    for dim in branches:
        total += (tokens // rate) * dim * element_bytes  # compressed_kv
        total += 2 * (tokens % rate) * series * dim * element_bytes  # buffer_kv + buffer_gate
        if overlap and tokens >= rate:  # overlap_kv (model dtype) + overlap_gate (float32)
            total += rate * dim * (element_bytes + FP32_BYTES)
    return total


def hf_layout(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
) -> LayoutResult:
    """Bytes of the cache transformers returns after one forward of ``tokens`` x ``seqs``."""
    check_load(tokens, seqs, tp, pp, dp)
    if tp != 1 or pp != 1:
        raise ConfigError(
            f"tp/pp: the hf layout is one process; got tp={tp} pp={pp}; use --tp 1 --pp 1",
            field="tp",
        )
    model_dtype = spec.torch_dtype or "float32"
    dtype = get_kv_dtype(kv_dtype, engine="hf", model_dtype=model_dtype)
    s = dtype.block_bytes
    groups: list[GroupBytes] = []
    for (kind, _window), layers in group_by_kind(spec.layers):
        first = layers.first
        note = ""
        if isinstance(first, CompressedAttention):
            per_seq = layers.total(
                lambda layer: (
                    compressed_bytes_hf(layer, tokens, s)
                    if isinstance(layer, CompressedAttention)
                    else 0
                )
            )
            per_token = layers.total(
                lambda layer: (
                    layer.bytes_per_token(s) if isinstance(layer, CompressedAttention) else 0
                )
            )
            note = (
                f"window of one K=V head + one compressed entry per {first.compress_rate} tokens, "
                "plus the uncompressed tail and its gates"
                + (" and the overlap window; indexer likewise" if first.index_head_dim else "")
            )
        elif isinstance(first, StateLayer):
            per_seq = layers.total(
                lambda layer: state_bytes_hf(layer, s) if isinstance(layer, StateLayer) else 0
            )
            per_token = 0
        elif isinstance(first, FullAttention | MLA):
            per_token = layers.total(
                lambda layer: (
                    layer.bytes_per_token(s) if isinstance(layer, FullAttention | MLA) else 0
                )
            )
            per_seq = per_token * _kept(first, tokens)
        else:
            per_token = per_seq = 0
        kept = _kept(first, tokens)
        groups.append(
            GroupBytes(kind, layers.indices, kept, per_token, per_seq, per_seq * seqs, note)
        )
    notes = (
        ()
        if spec.torch_dtype
        else ("config names no dtype: transformers loads float32 by default",)
    )
    stage = StageBytes(0, 0, spec.num_layers, tuple(groups))
    return LayoutResult("hf", dtype.name, tokens, seqs, tp, pp, dp, (stage,), notes=notes)
