"""Generic builders: layers from a :class:`~kvbudget.spec.traits.Traits` row and a config.

Reading follows transformers' configuration classes: a key is looked up under its canonical name
and then under the row's ``attribute_map`` alias; omitted keys take the class default the row
names (ledger source ``architecture_default``); ``layer_types`` (or the row's key for it, e.g.
``layers_block_type``) is used as given, else derived by the row's :class:`Pattern`; each entry is
mapped by the vocabulary in :mod:`kvbudget.spec.traits`. An entry outside that vocabulary, or a
state layer the row does not describe, leaves the model ``not_applicable`` with the field named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kvbudget.errors import SpecError
from kvbudget.spec.arch_common import ARCH, Types, listed_types, nth_types, split_types, summarize
from kvbudget.spec.arch_hybrid import with_shared_kv
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layer_runs import LayerSeq, Runs
from kvbudget.spec.layers import (
    MLA,
    ChunkedLocal,
    CompressedAttention,
    CompressedSparseAttention,
    FullAttention,
    LayerSpec,
    NoAttention,
    ParallelHybrid,
    SlidingWindow,
    StateLayer,
)
from kvbudget.spec.traits import (
    ATTENTION_TYPES,
    COMPRESSED_TYPES,
    HYBRID_TYPES,
    INDEXED_TYPES,
    NO_CACHE_TYPES,
    SCONV_HYBRID_TYPES,
    FieldRule,
    Pattern,
    StateRule,
    Traits,
)


class UnknownVocabulary(Exception):
    """A ``layer_types`` entry (or state) the traits cannot map; ``field`` names the key."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def key_of(traits: Traits, name: str) -> str:
    return traits.aliases.get(name, name)


def get(r: FieldReader, traits: Traits, name: str, **kwargs: Any) -> Any:
    key = key_of(traits, name) if not r.has(name) else name
    if "default" not in kwargs and name in traits.defaults:
        kwargs = {**kwargs, "default": traits.defaults[name], "default_source": ARCH}
    return r.get(key, name=name, **kwargs)


def get_int(r: FieldReader, traits: Traits, name: str, **kwargs: Any) -> int | None:
    key = key_of(traits, name) if not r.has(name) else name
    if "default" not in kwargs and name in traits.defaults:
        kwargs = {**kwargs, "default": traits.defaults[name], "default_source": ARCH}
    return r.get_int(key, name=name, **kwargs)


def attention_dims(r: FieldReader, traits: Traits) -> tuple[int, int, int] | None:
    """(num_kv_heads, head_dim, v_head_dim) of the head-based attention layers."""
    heads = get_int(r, traits, "num_attention_heads", note="query heads (never used as KV heads)")
    if (
        traits.multi_query_key
        and r.peek(traits.multi_query_key)
        and not (traits.multi_query_unless and r.peek(traits.multi_query_unless))
    ):
        r.get(traits.multi_query_key, note="multi-query attention: one KV head")
        kv: int | None = 1
        stray = r.peek(key_of(traits, "num_key_value_heads"))
        if stray not in (None, 1):
            r.record(
                "num_key_value_heads",
                1,
                ARCH,
                location=f"{r.location}:{r.prefix}{traits.multi_query_key}",
                note=f"{traits.multi_query_key}=true: the modeling code caches one KV head",
            )
            r.flag_conflict(
                "num_key_value_heads",
                f"config also says num_key_value_heads={stray!r}, which the config class derives "
                f"from {traits.multi_query_key} (1) and transformers' modeling ignores; vLLM 0.32 "
                "reads it (model_arch_config_convertor.py), so its pool would differ; fix the config",
            )
    elif (
        not r.has("num_key_value_heads")
        and not r.has(key_of(traits, "num_key_value_heads"))
        and traits.kv_heads_default
        and heads
        and not ("num_key_value_heads" in traits.defaults and "num_key_value_heads" not in r.config)
    ) or (traits.multi_query_key and heads and not r.has(key_of(traits, "num_key_value_heads"))):
        kv = heads
        r.record(
            "num_key_value_heads",
            heads,
            ARCH,
            location=f"{r.location}:{r.prefix}num_key_value_heads (absent)",
            note="the config class sets num_key_value_heads = num_attention_heads when omitted",
        )
    else:
        kv = get_int(r, traits, "num_key_value_heads", note="KV heads per layer")
    head_dim: int | None = None
    if r.has(key_of(traits, "head_dim")) or "head_dim" in traits.defaults:
        # a config class with its own head_dim default (DeepSeek-V4: 512) never derives it
        head_dim = get_int(r, traits, "head_dim")
    else:
        hidden = get_int(r, traits, "hidden_size")
        if hidden and heads:
            if hidden % heads and not traits.head_dim_floor:
                r.missing.append("head_dim")
            else:
                head_dim = hidden // heads
                r.derive(
                    "head_dim",
                    head_dim,
                    f"hidden_size // num_attention_heads = {hidden} // {heads}; config has no "
                    "head_dim",
                )
    if heads and kv and heads % kv:
        raise SpecError(
            f"{r.prefix}num_key_value_heads: {kv} does not divide num_attention_heads {heads}; fix the "
            "config or --set num_key_value_heads=N with N dividing the query heads",
            field="num_key_value_heads",
        )
    v_dim = 0
    if r.has("v_head_dim") and not traits.mla:
        v_dim = int(r.get("v_head_dim", note="V head size differs from K"))
    if kv is None or head_dim is None:
        return None
    return kv, head_dim, v_dim


def layer_types(r: FieldReader, traits: Traits, n: int) -> Types | None:
    """``layer_types`` as the config lists it, else derived by the row's pattern."""
    key = traits.layer_types_key
    for candidate in dict.fromkeys((key, "layer_types")):
        if r.has(candidate):
            value = r.get(candidate, name="layer_types")
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SpecError(
                    f"{r.prefix}{candidate}: expected a list of strings, got {value!r}",
                    field=candidate,
                )
            return listed_types(r, value, n)
    return derive_types(r, traits.pattern, n)


def derive_types(r: FieldReader, pattern: Pattern, n: int) -> Types | None:
    kind = pattern.kind
    types: Types
    if kind == "full":
        only = pattern.base if pattern.base != "sliding_attention" else "full_attention"
        types = Runs.periodic([only], n)
        note = f"every layer is {only if n else 'full_attention'}"
    elif kind == "window_all":
        window = r.peek("sliding_window")
        types = Runs.periodic(["sliding_attention" if window is not None else "full_attention"], n)
        note = "sliding_window applies to every layer" if window else "no sliding_window: full"
    elif kind == "qwen":
        use = r.get("use_sliding_window", default=False, default_source=ARCH, required=False)
        if not use or r.peek("sliding_window") is None:
            types = Runs.periodic(["full_attention"], n)
            note = "use_sliding_window is false: every layer is full"
        else:
            first = r.get_int("max_window_layers", default=0, default_source=ARCH) or 0
            types = split_types(n, first, "full_attention", "sliding_attention")
            note = f"layers >= max_window_layers ({first}) slide"
    else:
        every = _pattern_n(r, pattern)
        if every is None:
            return None
        if kind == "sliding_unless_nth":
            types = nth_types(n, every, every - 1, pattern.other, pattern.base)
            note = f"layer i is {pattern.other} when (i+1) % {every} == 0, else {pattern.base}"
            if pattern.last_is_other and n:
                types = Runs.chain([types[: n - 1], Runs.periodic([pattern.other], 1)])
                note += "; the last layer is always " + pattern.other
        elif kind == "nth_from_zero":
            types = nth_types(n, every, 0, pattern.other, pattern.base)
            note = f"layer i is {pattern.other} when i % {every} == 0, else {pattern.base}"
            if pattern.first_is_base and n:
                types = Runs.chain([Runs.periodic([pattern.base], 1), types[1:]])
                note += "; layer 0 is always " + pattern.base
        else:
            offset = r.get_int(pattern.offset_key or "", default=pattern.offset_default)
            types = nth_types(
                n, every, -1 if offset is None else offset, pattern.other, pattern.base
            )
            note = f"layer i is {pattern.other} when i % {every} == {offset}"
    r.record("layer_types", summarize(types), ARCH, note=f"derived by the config class: {note}")
    return types


def _pattern_n(r: FieldReader, pattern: Pattern) -> int | None:
    if pattern.key is None:
        return pattern.default
    return r.get_int(pattern.key, default=pattern.default, default_source=ARCH)


def _value(r: FieldReader, rule: FieldRule, defaults: dict[str, Any]) -> int | None:
    if isinstance(rule, str):
        if rule in defaults:
            return r.get_int(rule, default=defaults[rule], default_source=ARCH)
        return r.get_int(rule)
    if len(rule) == 2:  # ("const", n)
        return int(rule[1])
    op, left, right = rule
    if op == "or":  # the key's value; the fallback rule when it is null or "auto"
        present = left in r.config or left in r.overrides
        raw = r.peek(left) if present else defaults.get(left)
        if raw is None or raw == "auto":
            value = _value(r, right, defaults)
            if value is not None:
                r.derive(left, value, f"{left} is {raw!r}: the config class uses {_text(right)}")
            return value
        return _value(r, left, defaults)
    a = _value(r, left, defaults)
    b = _value(r, right, defaults)
    if a is None or b is None:
        return None
    return a * b if op == "mul" else a // b


def _text(rule: FieldRule) -> str:
    """A field rule as arithmetic (``mamba_expand * hidden_size``) for the ledger."""
    if isinstance(rule, str):
        return rule
    if len(rule) == 2:
        return str(rule[1])
    op, left, right = rule
    if op == "or":
        return _text(left)
    return f"({_text(left)} {'*' if op == 'mul' else '//'} {_text(right)})"


def state_layer(r: FieldReader, rule: StateRule, index: int) -> StateLayer | None:
    values: dict[str, int] = {}
    for name, spec in rule.fields.items():
        value = _value(r, spec, rule.defaults)
        if value is None:
            return None
        values[name] = value
    return StateLayer(index, rule.state_kind, **values)  # type: ignore[arg-type]


def mla_layer(
    r: FieldReader, index: int, own: dict[str, Any] | None = None, *, window: int = 0
) -> MLA | None:
    """An MLA layer; ``own`` holds this layer's ``per_layer_config`` overrides (transformers:
    "the attributes that differ from the global config"), ``window`` > 0 makes it sliding."""
    own = own or {}
    rank = r.get_int("kv_lora_rank", note="latent cached per token")
    rope = r.get_int("qk_rope_head_dim", note="shared rotary key cached per token")
    nope = r.get("qk_nope_head_dim", default=0, required=False)
    v_dim = r.get("v_head_dim", default=0, required=False)
    heads = r.peek("num_attention_heads") or 0
    if rank is None or rope is None:
        return None
    rank, rope = _own_int(r, own, "kv_lora_rank", rank), _own_int(r, own, "qk_rope_head_dim", rope)
    nope = _own_int(r, own, "qk_nope_head_dim", int(nope or 0))
    return MLA(index, rank, rope, nope, int(v_dim or 0), int(heads), sliding_window=window)


def _own_int(r: FieldReader, own: dict[str, Any], key: str, default: int) -> int:
    """A ``per_layer_config`` entry's own positive integer for ``key``, else ``default``."""
    value = own.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(
            f"{r.prefix}per_layer_config: {key} must be a positive integer, got "
            f"{str(value)[:40]!r}; fix the config",
            field="per_layer_config",
        )
    return value


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
    out = _ple_states(r, traits, out)
    out = _shared_indexers(r, traits, out, types)
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


def _index_dim(r: FieldReader, traits: Traits, i: int, t: str) -> int:
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


def _compressed(r: FieldReader, traits: Traits, i: int, t: str, head_dim: int) -> LayerSpec | None:
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
    index = _index_dim(r, traits, i, t)
    if window is None:
        return None
    if t == "compressed_sparse_attention":
        return CompressedSparseAttention(i, head_dim, window, rate, index_head_dim=index)
    return CompressedAttention(i, head_dim, window, rate)


def _sconv_hybrid(
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


def _ple_states(r: FieldReader, traits: Traits, layers: LayerSeq) -> LayerSeq:
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


def _shared_indexers(r: FieldReader, traits: Traits, layers: LayerSeq, types: Types) -> LayerSeq:
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


#: per-layer override keys that change what a layer caches (transformers ``per_layer_config``)
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
        return _sconv_hybrid(r, traits, i, t, dims)
    if t in COMPRESSED_TYPES and traits.compressed:
        assert dims is not None
        return _compressed(r, traits, i, t, dims[1])
    if t in INDEXED_TYPES:
        index = _index_dim(r, traits, i, t)
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
