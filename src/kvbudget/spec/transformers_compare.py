"""transformers' cache reading in kvbudget's layer terms (``calc --from-transformers``).

:func:`attention_spec` builds the layer an attention entry of
:func:`kvbudget.spec.from_transformers.read_layers` describes; :func:`disagreement` says why the
table's layer differs from an entry (None when they agree), the check
:func:`kvbudget.spec.from_transformers.from_transformers` runs on every layer.
"""

from __future__ import annotations

import math
from typing import Any

from kvbudget.spec.layers import (
    MLA,
    ChunkedLocal,
    FullAttention,
    KVShared,
    LayerSpec,
    NoAttention,
    ParallelHybrid,
    SlidingWindow,
)
from kvbudget.spec.state_layers import StateLayer


def attention_spec(entry: dict[str, Any]) -> LayerSpec:
    i, heads, k, v = entry["index"], entry["num_kv_heads"], entry["head_dim"], entry["v_head_dim"]
    index = int(entry.get("index_head_dim", 0))
    if entry["kind"] == "sliding":
        return SlidingWindow(
            i, heads, k, v if v != k else 0, sliding_window=entry["window"], index_head_dim=index
        )
    if entry["kind"] == "chunked":
        return ChunkedLocal(
            i,
            heads,
            k,
            v if v != k else 0,
            attention_chunk_size=entry["window"],
            index_head_dim=index,
        )
    return FullAttention(i, heads, k, v if v != k else 0, index_head_dim=index)


def disagreement(table: LayerSpec, entry: dict[str, Any]) -> str | None:
    """Why the table's layer differs from transformers' reading (None when they agree)."""
    kind = entry["kind"]
    index = int(entry.get("index_head_dim", 0))
    if isinstance(table, FullAttention | MLA) and table.index_head_dim != index:
        return f"indexer key {table.index_head_dim} vs {index}"
    if index and isinstance(table, FullAttention | MLA):
        # the indexer key's element size: its own (Dots3-Note: float32) or the K/V one
        want_bytes = getattr(table, "index_element_bytes", 0) or entry.get("kv_element_bytes")
        if entry.get("index_element_bytes") != want_bytes:
            return f"indexer key element bytes {want_bytes} vs {entry.get('index_element_bytes')}"
    if isinstance(table, MLA):
        want = (1, table.kv_lora_rank, table.qk_rope_head_dim)
        got = (entry.get("num_kv_heads"), entry.get("head_dim"), entry.get("v_head_dim"))
        want_kind = "sliding" if table.sliding_window else "full"
        if kind != want_kind or got != want:
            return f"MLA latent {want_kind} {want} vs {kind} {got}"
        window = table.sliding_window or None
        return None if window == entry.get("window") else f"window {window} vs {entry['window']}"
    if isinstance(table, FullAttention):
        if kind != table.kind:
            return f"kind {table.kind} vs {kind}"
        want_dims = (table.num_kv_heads, table.head_dim, table.v_dim)
        got_dims = (entry["num_kv_heads"], entry["head_dim"], entry["v_head_dim"])
        if want_dims != got_dims:
            return f"(kv_heads, head_dim, v_head_dim) {want_dims} vs {got_dims}"
        window = getattr(table, "sliding_window", None) or getattr(
            table, "attention_chunk_size", None
        )
        return None if window == entry["window"] else f"window {window} vs {entry['window']}"
    if isinstance(table, ParallelHybrid):
        if kind != "hybrid":
            return f"hybrid vs {kind}"
        attention = disagreement(table.attention, {**entry, "kind": entry["attention_kind"]})
        return attention or disagreement(table.state, {**entry, "kind": "state"})
    if isinstance(table, StateLayer):
        if kind != "state":
            return f"state vs {kind}"
        conv = sum(math.prod(s) for s in entry["conv_shapes"])
        rec = sum(math.prod(s) for s in entry["recurrent_shapes"])
        want_conv = 0 if table.state_kind == "linear" else table.conv_channels() * table.conv_kernel
        want_conv += table.aux_conv_elements()  # Qwen4-Exp's PLE short-conv state
        if (conv, rec) != (want_conv, table.ssm_elements()):
            return f"state elements (conv, recurrent) {(want_conv, table.ssm_elements())} vs {(conv, rec)}"
        return None
    if isinstance(table, KVShared | NoAttention):
        return None if kind == "none" else f"{table.kind} vs {kind}"
    return f"{table.kind} vs {kind}"  # pragma: no cover (every LayerSpec kind is handled above)
