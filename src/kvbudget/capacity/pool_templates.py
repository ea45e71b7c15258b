"""Retemplating a vLLM pool's layers once per distinct layer: the hybrid block-size raise (§1.6)
and ``--disable-hybrid-kv-cache-manager``. Runs stay runs (O(runs)); a listed sequence comes back
sorted by layer index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.pool import distinct_layers
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.layer_runs import IndexedRuns
from kvbudget.units import cdiv


def _retemplate(
    layers: Sequence[VllmLayerSpec], new: dict[VllmLayerSpec, VllmLayerSpec]
) -> Sequence[VllmLayerSpec]:
    """Each layer replaced by ``new[layer without index]`` (kept when absent), index kept;
    runs stay runs (a parallel hybrid run's parts each replaced), a listed sequence comes back
    sorted by layer index."""

    def one(layer: VllmLayerSpec, index: int) -> VllmLayerSpec:
        found = new.get(replace(layer, layer_index=0))
        return layer if found is None else replace(found, layer_index=index)

    if isinstance(layers, IndexedRuns):
        return layers.map_indexed(one)
    if isinstance(layers, PartRuns):
        return layers.map(one)
    out = [one(layer, layer.layer_index) for layer in layers]
    return sorted(out, key=lambda layer: layer.layer_index)


def raise_attention_block_for_mamba(layers: Sequence[VllmLayerSpec]) -> Sequence[VllmLayerSpec]:
    """Hybrid attention+mamba: raise the attention block size, then pad the mamba page (§1.6).

    ``attn_block = 16 * cdiv(mamba_page, 16 * attn_page_per_token)``; the mamba page is then
    padded to the attention page; mamba layers take the same block size (vLLM's
    ``cache_config.block_size``). Idempotent when the layout already did it. Per distinct layer.
    """
    distinct = distinct_layers(layers)
    mamba = [layer for layer in distinct if layer.kind == "mamba"]
    attn = [layer for layer in distinct if layer.holds_tokens]
    if not mamba or not attn:
        return layers if isinstance(layers, IndexedRuns | PartRuns) else list(layers)
    mamba_page = max(layer.page_size_bytes for layer in mamba)
    new: dict[VllmLayerSpec, VllmLayerSpec] = {}
    for layer in attn:
        if layer.page_size_bytes < mamba_page:
            new[layer] = layer.with_block_size(16 * cdiv(mamba_page, 16 * layer.bytes_per_token))
    raised = [new.get(layer, layer) for layer in attn]
    attn_page = max(layer.page_size_bytes for layer in raised)
    attn_block = max(layer.block_size for layer in raised)
    # vLLM's MambaSpec takes cache_config.block_size, which now holds the raised attention block
    for layer in mamba:
        new[layer] = replace(layer, page_size_bytes=attn_page, block_size=attn_block)
    return _retemplate(layers, new)


def unify_hybrid_as_full(layers: Sequence[VllmLayerSpec]) -> Sequence[VllmLayerSpec]:
    """``--disable-hybrid-kv-cache-manager`` (§2.1 step 1): sliding/chunked layers become full."""
    new = {
        key: replace(key, kind="full", sliding_window=None, attention_chunk_size=None)
        for key in distinct_layers(layers)
        if key.windowed
    }
    return _retemplate(layers, new)


__all__ = ["raise_attention_block_for_mamba", "unify_hybrid_as_full"]
