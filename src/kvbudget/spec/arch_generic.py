"""Generic builders: layers from a :class:`~kvbudget.spec.traits.Traits` row and a config.

Reading follows transformers' configuration classes: a key is looked up under its canonical name
and then under the row's ``attribute_map`` alias; omitted keys take the class default the row
names (ledger source ``architecture_default``); ``layer_types`` (or the row's key for it, e.g.
``layers_block_type``) is used as given, else derived by the row's :class:`Pattern`; each entry is
mapped by the vocabulary in :mod:`kvbudget.spec.traits`. An entry outside that vocabulary, or a
state layer the row does not describe, leaves the model ``not_applicable`` with the field named.
The field reading lives in :mod:`kvbudget.spec.arch_read`, the special layers (indexer keys,
compressed, short-conv hybrids, PLE states) in :mod:`kvbudget.spec.arch_special`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kvbudget.errors import SpecError
from kvbudget.spec.arch_common import ARCH, Types
from kvbudget.spec.arch_hybrid import with_shared_kv
from kvbudget.spec.arch_read import (
    UnknownVocabulary,
    attention_dims,
    get_int,
    key_of,
    layer_types,
    mla_layer,
    state_layer,
)
from kvbudget.spec.arch_special import (
    compressed_layer,
    index_dim,
    ple_states,
    sconv_hybrid_layer,
    shared_indexers,
)
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import (
    ChunkedLocal,
    FullAttention,
    LayerSpec,
    NoAttention,
    ParallelHybrid,
    SlidingWindow,
)
from kvbudget.spec.traits import (
    ATTENTION_TYPES,
    COMPRESSED_TYPES,
    HYBRID_TYPES,
    INDEXED_TYPES,
    NO_CACHE_TYPES,
    SCONV_HYBRID_TYPES,
    Traits,
)


def build_from_traits(r: FieldReader, traits: Traits) -> Sequence[LayerSpec] | None:
    """Layers of a model described by ``traits`` (None when a required field is missing)."""
    listed = r.peek(traits.layer_types_key)
    if not r.has(key_of(traits, "num_hidden_layers")) and isinstance(listed, list):
        n: int | None = len(listed)
        r.derive(
            "num_hidden_layers", n, f"len({traits.layer_types_key}) (the config class's property)"
        )
    else:
        n = get_int(r, traits, "num_hidden_layers", note="decoder layers")
    if n is None:
        return None
    types = layer_types(r, traits, n)
    if types is None:
        return None
    distinct = types.distinct()
    needs_heads = (
        any(
            ATTENTION_TYPES.get(t)
            or t in HYBRID_TYPES
            or (t in SCONV_HYBRID_TYPES and traits.sconv_hybrid)
            or t in INDEXED_TYPES
            or t in COMPRESSED_TYPES
            for t in distinct
        )
        and not traits.mla
    )
    dims = attention_dims(r, traits) if needs_heads else None
    if needs_heads and dims is None:
        return None
    window = _window(r, distinct)
    chunk = (
        r.get_int("attention_chunk_size", note="chunk of the local layers")
        if "chunked_attention" in distinct
        else None
    )
    per_layer = _per_layer_config(r, n)
    full_dims = dims if per_layer else _global_dims(r, traits, dims, distinct)
    templates: dict[str, LayerSpec] = {}
    for t, indices in types.runs():
        if t not in templates:
            layer_dims = full_dims if ATTENTION_TYPES.get(t) == "full" else dims
            layer = _one(r, traits, indices[0], t, layer_dims, window, chunk)
            if layer is None:
                return None
            templates[t] = layer
    out = LayerSeq.from_runs(types, lambda t, i: replace(templates[t], layer_index=i))
    own_layers: dict[int, LayerSpec] = {}
    for i, own in per_layer.items():
        layer_dims = dims
        if dims is not None and own:
            layer_dims = (
                int(own.get("num_key_value_heads", dims[0])),
                int(own.get("head_dim", dims[1])),
                int(own.get("v_head_dim", dims[2])),
            )
        layer_window = int(own.get("sliding_window", window)) if window is not None else None
        layer = _one(r, traits, i, types[i], layer_dims, layer_window, chunk, own)
        if layer is None:
            return None
        own_layers[i] = layer
    if own_layers:
        out = out.replaced(own_layers)
    out = ple_states(r, traits, out)
    out = shared_indexers(r, traits, out, types)
    return _share_kv(r, out, types)


def _global_dims(
    r: FieldReader,
    traits: Traits,
    dims: tuple[int, int, int] | None,
    distinct: Sequence[str],
) -> tuple[int, int, int] | None:
    """Dims of the full-attention layers when the row gives them their own (Gemma-4)."""
    if traits.global_dims is None or dims is None:
        return dims
    if not any(ATTENTION_TYPES.get(t) == "full" for t in distinct):
        return dims
    head_key, head_default, kv_key, gate_key = traits.global_dims
    head_dim = r.get_int(
        head_key, default=head_default, default_source=ARCH, note="head size of the full layers"
    )
    gate = r.get(gate_key, default=False, default_source=ARCH, required=False)
    if not isinstance(gate, bool):
        raise SpecError(
            f"{r.prefix}{gate_key}: expected true or false, got {str(gate)[:40]!r}; fix the config",
            field=gate_key,
        )
    kv = dims[0]
    if gate and r.has(kv_key):
        kv = r.get_int(kv_key, note=f"KV heads of the full layers ({gate_key} is true)") or kv
    elif r.has(kv_key):
        r.get(kv_key, note=f"not used: {gate_key} is false, full layers keep num_key_value_heads")
    return kv, head_dim or dims[1], dims[2]


PER_LAYER_KEYS = (
    "head_dim",
    "num_key_value_heads",
    "v_head_dim",
    "sliding_window",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
)


def _per_layer_config(r: FieldReader, n: int) -> dict[int, dict[str, Any]]:
    """``per_layer_config`` (transformers 5: ``{"05": {"head_dim": 512}}``) by layer index."""
    value = r.peek("per_layer_config")
    if not value:
        return {}
    if not isinstance(value, dict):
        raise SpecError(
            f"{r.prefix}per_layer_config: expected a mapping of layer index to fields, got {value!r}",
            field="per_layer_config",
        )
    out: dict[int, dict[str, Any]] = {}
    for key, fields in value.items():
        if not str(key).isdigit() or not isinstance(fields, dict) or int(key) >= n:
            raise SpecError(
                f"{r.prefix}per_layer_config: entry {key!r} is not a layer index below {n} with fields",
                field="per_layer_config",
            )
        out[int(key)] = {k: v for k, v in fields.items() if k in PER_LAYER_KEYS}
    r.get("per_layer_config", note=f"per-layer overrides read: {', '.join(PER_LAYER_KEYS)}")
    return out


def _share_kv(r: FieldReader, layers: LayerSeq, types: Types) -> LayerSeq:
    """``num_kv_shared_layers``: the last N layers reuse the KV of the last earlier layer of their type."""
    if not r.has("num_kv_shared_layers"):
        return layers
    shared = r.get("num_kv_shared_layers", note="the last N layers reuse earlier layers' KV")
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise SpecError(
            f"{r.prefix}num_kv_shared_layers: expected an integer >= 0, got {shared!r}",
            field="num_kv_shared_layers",
        )
    if not shared:
        return layers
    first = len(layers) - shared
    if first <= 0:
        raise SpecError(
            f"{r.prefix}num_kv_shared_layers: {shared} leaves no layer to share from "
            f"({len(layers)} layers)",
            field="num_kv_shared_layers",
        )
    return with_shared_kv(r, layers, types, first)


def _window(r: FieldReader, types: Sequence[str]) -> int | None:
    if not any(ATTENTION_TYPES.get(t) == "sliding" for t in types):
        return None
    return r.get_int("sliding_window", note="window of the sliding layers")


def _one(
    r: FieldReader,
    traits: Traits,
    i: int,
    t: str,
    dims: tuple[int, int, int] | None,
    window: int | None,
    chunk: int | None,
    own: dict[str, Any] | None = None,
) -> LayerSpec | None:
    if t in SCONV_HYBRID_TYPES and traits.sconv_hybrid:
        assert dims is not None
        return sconv_hybrid_layer(r, traits, i, t, dims)
    if t in COMPRESSED_TYPES and traits.compressed:
        assert dims is not None
        return compressed_layer(r, traits, i, t, dims[1])
    if t in INDEXED_TYPES:
        index = index_dim(r, traits, i, t)
        if traits.mla:
            latent = mla_layer(r, i, own)
            if latent is None:
                return None
            return replace(
                latent, index_head_dim=index, index_element_bytes=traits.index_element_bytes
            )
        assert dims is not None
        return FullAttention(i, dims[0], dims[1], dims[2], index_head_dim=index)
    kind = ATTENTION_TYPES.get(t)
    if kind is not None:
        if traits.mla:
            if kind == "sliding" and traits.mla_sliding:
                return None if window is None else mla_layer(r, i, own, window=window)
            if kind != "full":
                raise UnknownVocabulary("layer_types", f"layer {i}: {t!r} with MLA is not modelled")
            return mla_layer(r, i, own)
        assert dims is not None
        kv, head_dim, v_dim = dims
        if kind == "sliding":
            kv *= traits.sliding_kv_factor
            return None if window is None else SlidingWindow(i, kv, head_dim, v_dim, window)
        if kind == "chunked":
            return None if chunk is None else ChunkedLocal(i, kv, head_dim, v_dim, chunk)
        return FullAttention(i, kv, head_dim, v_dim)
    rule = {
        "linear_attention": traits.linear or traits.mamba,
        "mamba": traits.mamba,
        "conv": traits.conv,
    }.get(t)
    if rule is not None:
        return state_layer(r, rule, i)
    if t in HYBRID_TYPES and traits.hybrid is not None and not traits.mla:
        assert dims is not None
        state = state_layer(r, traits.hybrid, i)
        return None if state is None else ParallelHybrid(i, FullAttention(i, *dims), state)
    if t in NO_CACHE_TYPES:
        return NoAttention(i)
    raise UnknownVocabulary(
        traits.layer_types_key,
        f"layer {i} is {t!r}: kvbudget has no rule for what this layer type stores in this "
        f"architecture (known: {', '.join(sorted(ATTENTION_TYPES))}"
        + (", linear_attention" if traits.linear else "")
        + (", mamba" if traits.mamba else "")
        + (", conv" if traits.conv else "")
        + (", hybrid" if traits.hybrid else "")
        + ")",
    )
