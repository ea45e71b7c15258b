"""Layer kind names and the questions asked of a list of layers (:mod:`kvbudget.spec.layers`)."""

from __future__ import annotations

from collections.abc import Iterable

from kvbudget.spec.layers import MLA, CompressedAttention, LayerSpec

#: DeepSeek-V4's compressed attention kinds (:class:`~kvbudget.spec.layers.CompressedAttention`)
COMPRESSED_KINDS = ("heavily_compressed", "compressed_sparse")

#: Attention kinds whose per-token bytes come from ``num_kv_heads`` and ``head_dim``.
HEAD_KINDS = ("full", "sliding", "chunked")


def _distinct(layers: Iterable[LayerSpec]) -> Iterable[LayerSpec]:
    """``layers``, or a :class:`~kvbudget.spec.layer_runs.LayerSeq`'s distinct layers."""
    distinct = getattr(layers, "distinct", None)
    items: Iterable[LayerSpec] = distinct() if callable(distinct) else layers
    return items


def has_indexer(layers: Iterable[LayerSpec]) -> bool:
    """Whether any layer caches a sparse-attention indexer key beside its K/V or latent
    (``layers`` may be a :class:`~kvbudget.spec.layer_runs.LayerSeq`: its distinct layers)."""
    return any(getattr(layer, "index_head_dim", 0) for layer in _distinct(layers))


def has_sliding_latent(layers: Iterable[LayerSpec]) -> bool:
    """Whether any MLA layer keeps only a sliding window of latents (Dots3-Note); ``layers`` may
    be a :class:`~kvbudget.spec.layer_runs.LayerSeq` (its distinct layers are read)."""
    return any(isinstance(layer, MLA) and layer.sliding_window for layer in _distinct(layers))


def has_compressed_attention(layers: Iterable[LayerSpec]) -> bool:
    """Whether any layer is DeepSeek-V4's compressed attention (every engine serves such a model
    with its DeepSeek-V4 pools); ``layers`` may be a :class:`~kvbudget.spec.layer_runs.LayerSeq`."""
    return any(isinstance(layer, CompressedAttention) for layer in _distinct(layers))


LAYER_KINDS = (
    "full",
    "sliding",
    "chunked",
    "mla",
    "state",
    "shared",
    "none",
    "hybrid",
    "heavily_compressed",
    "compressed_sparse",
)
