"""Special layers of the generic builder (:mod:`kvbudget.spec.arch_generic`).

The sparse-attention indexer key (``indexed_attention``), DeepSeek-V4's compressed layers,
Inkling's short-convolution hybrids, Qwen4-Exp's PLE convolution states and ``indexer_types``
layers that share their indexer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvbudget.errors import SpecError
from kvbudget.spec.arch_common import ARCH, Types
from kvbudget.spec.arch_read import UnknownVocabulary, get_int
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layer_runs import LayerSeq, Runs
from kvbudget.spec.layers import (
    MLA,
    CompressedAttention,
    CompressedSparseAttention,
    FullAttention,
    LayerSpec,
    ParallelHybrid,
    SlidingWindow,
)
from kvbudget.spec.state_layers import StateLayer
from kvbudget.spec.traits import Traits


def index_dim(r: FieldReader, traits: Traits, i: int, t: str) -> int:
    """The indexer key size an ``indexed_attention`` layer caches (refused without a rule)."""
    if traits.index_key is None:
        raise UnknownVocabulary(
            traits.layer_types_key,
            f"layer {i} is {t!r}: its sparse-attention indexer keeps a key cache kvbudget has no "
            "rule for in this architecture",
        )
    defaults: dict[str, Any] = (
        {} if traits.index_default is None else {"default": traits.index_default}
    )
    value = r.get_int(
        traits.index_key,
        default_source=ARCH,
        note="indexer key cached per token (one head)",
        **defaults,
    )
    if traits.index_key == "index_head_dim" and r.has("index_n_heads"):
        r.get("index_n_heads", note="indexer query heads: not cached")
    return value or 0


def compressed_layer(
    r: FieldReader, traits: Traits, i: int, t: str, head_dim: int
) -> LayerSpec | None:
    """A DeepSeek-V4 compressed layer: its window, its rate (``compress_rates``, normalised), and
    for CSA the indexer key per compressed entry."""
    window = get_int(r, traits, "sliding_window", note="window of the shared K=V head")
    rates = r.get("compress_rates", note="source tokens per compressed entry, per layer type")
    rate = rates.get(t) if isinstance(rates, dict) else None
    if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        raise SpecError(
            f"{r.prefix}compress_rates: expected a positive integer for {t!r}, got "
            f"{str(rate)[:40]!r}; fix the config",
            field="compress_rates",
        )
    index = index_dim(r, traits, i, t)
    if window is None:
        return None
    if t == "compressed_sparse_attention":
        return CompressedSparseAttention(i, head_dim, window, rate, index_head_dim=index)
    return CompressedAttention(i, head_dim, window, rate)


def sconv_hybrid_layer(
    r: FieldReader, traits: Traits, i: int, t: str, dims: tuple[int, int, int]
) -> LayerSpec | None:
    """Inkling: attention (full, or sliding with the swa_* heads) plus four float32 short-conv
    states over K, V (kv_heads x head_dim each) and the attention and MLP inputs (hidden each)."""
    kv, head_dim = dims[0], dims[1]
    attention: FullAttention
    if t == "hybrid_sliding":
        swa_kv = get_int(r, traits, "swa_num_key_value_heads", note="KV heads of sliding layers")
        swa_dim = get_int(r, traits, "swa_head_dim", note="head size of the sliding layers")
        window = get_int(r, traits, "sliding_window", note="window of the sliding layers")
        if swa_kv is None or swa_dim is None or window is None:
            return None
        kv, head_dim = swa_kv, swa_dim
        attention = SlidingWindow(i, kv, head_dim, 0, window)
    else:
        attention = FullAttention(i, kv, head_dim)
    kernel = get_int(r, traits, "conv_kernel_size", note="short-convolution kernel (4 per layer)")
    hidden = get_int(r, traits, "hidden_size", note="channels of the attention and MLP convs")
    if kernel is None or hidden is None:
        return None
    channels = 2 * kv * head_dim + 2 * hidden
    return ParallelHybrid(i, attention, StateLayer(i, "sconv_fp32", kernel, channels))


def ple_states(r: FieldReader, traits: Traits, layers: LayerSeq) -> LayerSeq:
    """Qwen4-Exp: each ``ple_layer_ids`` layer (1-indexed, linear attention) keeps a second conv
    state, ``[batch, hc_count x hidden_size, (ple_conv_kernel_size - 1) x ngram_size]`` in the
    model dtype (``modeling_qwen4_exp.py`` ``Qwen4ExpTextPLELayer`` lines 1206-1237)."""
    key = traits.ple_layers_key
    if key is None or not r.peek(key):
        return layers
    ids = r.get(key, note="1-indexed layers with a PLE short-convolution state")
    n = len(layers)
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= n for i in ids
    ):
        raise SpecError(
            f"{r.prefix}{key}: expected 1-indexed layer ids in [1, {n}], got {str(ids)[:40]!r}; "
            "fix the config",
            field=key,
        )
    hc = get_int(r, traits, "hc_count", note="residual streams: PLE conv channels x hidden")
    hidden = get_int(r, traits, "hidden_size")
    kernel = get_int(r, traits, "ple_conv_kernel_size", note="PLE short-convolution kernel")
    dilation = get_int(r, traits, "ngram_size", note="PLE convolution dilation")
    if hc is None or hidden is None or kernel is None or dilation is None:
        return layers
    out: dict[int, LayerSpec] = {}
    for i in sorted(set(ids)):
        layer = layers[i - 1]
        if not isinstance(layer, StateLayer):
            raise SpecError(
                f"{r.prefix}{key}: layer {i} is not linear attention; transformers accepts PLE "
                "only on linear_attention layers (configuration_qwen4_exp.py); fix the config",
                field=key,
            )
        out[i - 1] = replace(
            layer, aux_conv_channels=hc * hidden, aux_conv_window=(kernel - 1) * dilation
        )
    return layers.replaced(out)


def shared_indexers(r: FieldReader, traits: Traits, layers: LayerSeq, types: Types) -> LayerSeq:
    """Layers whose ``indexer_types`` entry is "shared" run no indexer and cache no indexer key."""
    key = traits.indexer_types_key
    if key is None or not r.has(key):
        return layers
    value = r.get(key, note='"full" layers run their own indexer; "shared" reuse the top-k')
    if (
        not isinstance(value, list)
        or len(value) != len(layers)
        or any(v not in ("full", "shared") for v in value)
    ):
        raise SpecError(
            f"{r.prefix}{key}: expected {len(layers)} entries of 'full' or 'shared', got "
            f"{str(value)[:40]!r}; fix the config",
            field=key,
        )
    flags: Runs[str] = Runs.from_items(value)
    shared: dict[int, LayerSpec] = {}
    for mode, indices in flags.runs():
        if mode != "shared":
            continue
        for i in indices:
            layer = layers[i]
            if isinstance(layer, FullAttention | MLA) and layer.index_head_dim:
                shared[i] = replace(layer, index_head_dim=0)
    return layers.replaced(shared) if shared else layers
