"""Reading a :class:`~kvbudget.spec.traits.Traits` row's fields from a config.

Keys are looked up under their canonical name and then under the row's ``attribute_map`` alias;
omitted keys take the class default the row names (ledger source ``architecture_default``).
``layer_types`` is used as given, else derived by the row's :class:`Pattern`. Shared by the
generic builder (:mod:`kvbudget.spec.arch_generic`) and its special layers
(:mod:`kvbudget.spec.arch_special`).
"""

from __future__ import annotations

from typing import Any

from kvbudget.errors import SpecError
from kvbudget.spec.arch_common import ARCH, Types, listed_types, nth_types, split_types, summarize
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layer_runs import Runs
from kvbudget.spec.layers import MLA
from kvbudget.spec.state_layers import StateLayer
from kvbudget.spec.traits import FieldRule, Pattern, StateRule, Traits


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
