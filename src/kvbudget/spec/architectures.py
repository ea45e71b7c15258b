"""Layer structure of each supported architecture, read from its config with provenance.

Every rule here mirrors the architecture's own definition in Hugging Face transformers
(``models/<name>/configuration_<name>.py``, 5.x): which layers slide, which are chunked, which
hold a recurrent state, which reuse another layer's KV. Each builder returns the layer list or
``None`` when a required field is missing (the reader lists it).
"""

from __future__ import annotations

from collections.abc import Callable

from kvbudget.errors import SpecError
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layers import (
    MLA,
    ChunkedLocal,
    FullAttention,
    KVShared,
    LayerSpec,
    NoAttention,
    SlidingWindow,
    StateLayer,
)
from kvbudget.spec.provenance import SourceKind

ARCH: SourceKind = "architecture_default"


def attention_dims(r: FieldReader) -> tuple[int, int] | None:
    """(num_kv_heads, head_dim); head_dim derived from hidden/heads only when absent."""
    heads = r.get_int("num_attention_heads", note="query heads (never used as KV heads)")
    kv = r.get_int("num_key_value_heads", note="KV heads per layer")
    head_dim: int | None = None
    if r.has("head_dim"):
        head_dim = r.get_int("head_dim")
    else:
        hidden = r.get_int("hidden_size")
        if hidden and heads:
            if hidden % heads:
                r.missing.append("head_dim")
            else:
                head_dim = hidden // heads
                r.derive(
                    "head_dim",
                    head_dim,
                    f"hidden_size / num_attention_heads = {hidden} / {heads}; config has no head_dim",
                )
    if kv is None or head_dim is None:
        return None
    return kv, head_dim


def _check_types(r: FieldReader, types: list[str], n: int) -> list[str]:
    if len(types) != n:
        raise SpecError(
            f"{r.prefix}layer_types: has {len(types)} entries but num_hidden_layers is {n}; fix the config",
            field="layer_types",
        )
    return types


def _explicit_types(r: FieldReader, n: int) -> list[str] | None:
    if not r.has("layer_types"):
        return None
    value = r.get("layer_types")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(
            f"{r.prefix}layer_types: expected a list of strings, got {value!r}", field="layer_types"
        )
    return _check_types(r, list(value), n)


def _derived_types(r: FieldReader, types: list[str], note: str) -> list[str]:
    r.record("layer_types", _summarize(types), ARCH, note=note)
    return types


def _summarize(types: list[str]) -> str:
    counts: dict[str, int] = {}
    for t in types:
        counts[t] = counts.get(t, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in counts.items())


def _sliding_window(r: FieldReader) -> int | None:
    return r.get_int("sliding_window", note="window of the sliding layers")


def _attention_layers(
    r: FieldReader, types: list[str], dims: tuple[int, int], *, chunk: int | None = None
) -> list[LayerSpec] | None:
    kv, head_dim = dims
    window = _sliding_window(r) if "sliding_attention" in types else None
    out: list[LayerSpec] = []
    for i, t in enumerate(types):
        if t == "sliding_attention":
            if window is None:
                return None
            out.append(SlidingWindow(i, kv, head_dim, sliding_window=window))
        elif t == "chunked_attention":
            if chunk is None:
                return None
            out.append(ChunkedLocal(i, kv, head_dim, attention_chunk_size=chunk))
        elif t in ("full_attention", "attention"):
            out.append(FullAttention(i, kv, head_dim))
        else:
            raise SpecError(
                f"{r.prefix}layer_types[{i}]: {t!r} is not an attention type kvbudget models",
                field="layer_types",
            )
    return out


def _num_layers(r: FieldReader) -> int | None:
    return r.get_int("num_hidden_layers", note="decoder layers")


def build_dense(r: FieldReader, model_type: str) -> list[LayerSpec] | None:
    """Llama, Mistral, Mixtral, Qwen2/3, Phi-3, Gemma 1/2/3, gpt-oss: full and sliding layers."""
    n = _num_layers(r)
    dims = attention_dims(r)
    if n is None or dims is None:
        return None
    types = _explicit_types(r, n)
    if types is None:
        types = _default_dense_types(r, model_type, n)
        if types is None:
            return None
    return _attention_layers(r, types, dims)


def _default_dense_types(r: FieldReader, model_type: str, n: int) -> list[str] | None:
    if model_type in ("gemma2", "gpt_oss"):
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
        return _derived_types(
            r, types, f"{model_type}: sliding and full layers alternate (sliding first)"
        )
    if model_type == "gemma3_text":
        pattern = r.get_int(
            "sliding_window_pattern", default=6, default_source=ARCH, note="every Nth layer is full"
        )
        if pattern is None:
            return None
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
        return _derived_types(
            r, types, f"gemma3: layer i is full when (i+1) % {pattern} == 0, else sliding"
        )
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        return _qwen_types(r, n)
    if model_type in ("mistral", "mixtral", "phi3", "starcoder2"):
        default = 4096 if model_type == "mistral" else None
        window = r.get(
            "sliding_window",
            default=default,
            default_source=ARCH,
            null_is_value=True,
            required=False,
        )
        kind = "sliding_attention" if window is not None else "full_attention"
        note = (
            f"{model_type}: sliding_window {window} applies to every layer"
            if window
            else f"{model_type}: no window"
        )
        return _derived_types(r, [kind] * n, note)
    return _derived_types(r, ["full_attention"] * n, f"{model_type}: every layer is full attention")


def _qwen_types(r: FieldReader, n: int) -> list[str]:
    use = r.get("use_sliding_window", default=False, default_source=ARCH, required=False)
    window = r.peek("sliding_window")
    if not use:
        if window is not None:
            r.record(
                "sliding_window",
                window,
                r.config_source,
                location=f"{r.location}:{r.prefix}sliding_window",
            )
            r.flag_conflict(
                "sliding_window",
                f"sliding_window={window} is present but use_sliding_window=false: no layer slides "
                "(use_sliding_window wins, as in transformers and vLLM)",
            )
        return _derived_types(
            r, ["full_attention"] * n, "use_sliding_window is false: every layer is full"
        )
    first = r.get_int(
        "max_window_layers",
        default=0,
        default_source=ARCH,
        note="layers below this index stay full",
    )
    start = first or 0
    types = ["sliding_attention" if i >= start else "full_attention" for i in range(n)]
    return _derived_types(
        r, types, f"use_sliding_window: layers >= max_window_layers ({start}) slide"
    )


def build_llama4(r: FieldReader, model_type: str) -> list[LayerSpec] | None:
    """Llama 4: RoPE layers use chunked local attention, every 4th (NoPE) layer is full."""
    n = _num_layers(r)
    dims = attention_dims(r)
    if n is None or dims is None:
        return None
    chunk = r.get_int(
        "attention_chunk_size", default=None, required=False, note="chunk of the local layers"
    )
    types = _explicit_types(r, n)
    if types is None:
        if r.has("no_rope_layers"):
            flags = r.get("no_rope_layers")
            if not isinstance(flags, list) or len(flags) != n:
                raise SpecError(
                    f"{r.prefix}no_rope_layers: expected {n} 0/1 entries, got {flags!r}",
                    field="no_rope_layers",
                )
        else:
            interval = r.get_int(
                "no_rope_layer_interval",
                default=4,
                default_source=ARCH,
                note="every Nth layer is NoPE/global",
            )
            assert interval is not None
            flags = [int((i + 1) % interval != 0) for i in range(n)]
            r.record(
                "no_rope_layers",
                _summarize([str(f) for f in flags]),
                ARCH,
                note=f"int((i+1) % {interval} != 0)",
            )
        types = [
            "chunked_attention" if f and chunk is not None else "full_attention" for f in flags
        ]
        r.record(
            "layer_types",
            _summarize(types),
            "derived",
            note="RoPE layers chunked, NoPE layers full",
        )
    return _attention_layers(r, types, dims, chunk=chunk)


def build_mla(r: FieldReader, model_type: str) -> list[LayerSpec] | None:
    """DeepSeek-V2/V3 (and Kimi-K2): every layer caches one latent of kv_lora_rank + rope dims."""
    n = _num_layers(r)
    rank = r.get_int("kv_lora_rank", note="latent cached per token")
    rope = r.get_int("qk_rope_head_dim", note="shared rotary key cached per token")
    nope = r.get("qk_nope_head_dim", default=0, required=False)
    v_dim = r.get("v_head_dim", default=0, required=False)
    heads = r.get_int("num_attention_heads")
    if r.has("num_key_value_heads"):
        r.get(
            "num_key_value_heads",
            note="nominal for MLA: the latent is shared by all heads; not used",
        )
    if n is None or rank is None or rope is None:
        return None
    return [MLA(i, rank, rope, int(nope), int(v_dim), heads or 0) for i in range(n)]


def build_jamba(r: FieldReader, model_type: str) -> list[LayerSpec] | None:
    """Jamba: attention when i % attn_layer_period == attn_layer_offset, Mamba elsewhere."""
    n = _num_layers(r)
    dims = attention_dims(r)
    period = r.get_int("attn_layer_period", default=8, default_source=ARCH)
    offset = r.get("attn_layer_offset", default=4, default_source=ARCH)
    hidden = r.get_int("hidden_size")
    expand = r.get_int("mamba_expand", default=2, default_source=ARCH)
    d_state = r.get_int("mamba_d_state", default=16, default_source=ARCH)
    d_conv = r.get_int("mamba_d_conv", default=4, default_source=ARCH)
    if None in (n, dims, period, hidden, expand, d_state, d_conv):
        return None
    assert n and dims and period and hidden and expand and d_state and d_conv
    inner = expand * hidden
    r.derive("mamba_intermediate_size", inner, f"mamba_expand * hidden_size = {expand} * {hidden}")
    out: list[LayerSpec] = []
    for i in range(n):
        if i % period == offset:
            out.append(FullAttention(i, *dims))
        else:
            out.append(
                StateLayer(
                    i, "mamba", conv_kernel=d_conv, intermediate_size=inner, state_size=d_state
                )
            )
    r.record(
        "layer_types",
        _summarize([layer.kind for layer in out]),
        "derived",
        note=f"attention at i % {period} == {offset}",
    )
    return out


def build_qwen3_next(r: FieldReader, model_type: str) -> list[LayerSpec] | None:
    """Qwen3-Next: gated-delta-net linear attention, full attention every Nth layer."""
    n = _num_layers(r)
    dims = attention_dims(r)
    if n is None:
        return None
    types = _explicit_types(r, n)
    if types is None:
        interval = r.get_int("full_attention_interval", default=4, default_source=ARCH)
        assert interval is not None
        types = _derived_types(
            r,
            ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)],
            f"full every {interval}th",
        )
    kernel = r.get_int("linear_conv_kernel_dim")
    k_dim = r.get_int("linear_key_head_dim")
    k_heads = r.get_int("linear_num_key_heads")
    v_heads = r.get_int("linear_num_value_heads")
    v_dim = r.get_int("linear_value_head_dim")
    if dims is None or None in (kernel, k_dim, k_heads, v_heads, v_dim):
        return None
    out: list[LayerSpec] = []
    for i, t in enumerate(types):
        if t == "linear_attention":
            out.append(
                StateLayer(
                    i,
                    "gdn",
                    conv_kernel=kernel or 0,
                    num_heads=v_heads or 0,
                    head_dim=v_dim or 0,
                    num_k_heads=k_heads or 0,
                    head_k_dim=k_dim or 0,
                )
            )
        else:
            out.append(FullAttention(i, *dims))
    return out


def build_minimax(r: FieldReader, model_type: str) -> list[LayerSpec] | None:
    """MiniMax-Text-01: lightning (linear) attention with softmax attention layers in between."""
    n = _num_layers(r)
    dims = attention_dims(r)
    heads = r.peek("num_attention_heads")
    if n is None or dims is None or heads is None:
        return None
    types = _explicit_types(r, n)
    if types is None:
        types = _derived_types(
            r,
            ["full_attention" if (i + 1) % 2 else "linear_attention" for i in range(n)],
            "minimax default alternation",
        )
    out: list[LayerSpec] = []
    for i, t in enumerate(types):
        if t == "linear_attention":
            out.append(StateLayer(i, "linear", num_heads=int(heads), head_dim=dims[1]))
        else:
            out.append(FullAttention(i, *dims))
    return out


def build_gemma3n(r: FieldReader, model_type: str) -> list[LayerSpec] | None:
    """Gemma-3n: sliding/full layers; the last ``num_kv_shared_layers`` reuse earlier KV."""
    n = _num_layers(r)
    dims = attention_dims(r)
    if n is None or dims is None:
        return None
    types = _explicit_types(r, n)
    if types is None:
        types = _derived_types(
            r,
            ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n)],
            "gemma3n: every 5th full",
        )
    shared = r.get_int("num_kv_shared_layers", default=15, default_source=ARCH, required=False) or 0
    base = _attention_layers(r, types, dims)
    if base is None:
        return None
    first_shared = n - shared
    out: list[LayerSpec] = list(base[:first_shared])
    unshared = types[:first_shared]
    for i in range(first_shared, n):
        t = types[i]
        if t not in unshared:
            raise SpecError(
                f"{r.prefix}layer_types: shared layer {i} ({t}) has no earlier layer of that type",
                field="layer_types",
            )
        source = first_shared - 1 - unshared[::-1].index(t)
        out.append(KVShared(i, source, base[source].kind))
    return out


Builder = Callable[[FieldReader, str], list[LayerSpec] | None]

BUILDERS: dict[str, Builder] = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "phi3",
            "gemma",
            "gemma2",
            "gemma3_text",
            "gpt_oss",
            "starcoder2",
        ),
        build_dense,
    ),
    "llama4_text": build_llama4,
    "deepseek_v2": build_mla,
    "deepseek_v3": build_mla,
    "kimi_k2": build_mla,
    "jamba": build_jamba,
    "qwen3_next": build_qwen3_next,
    "minimax": build_minimax,
    "gemma3n_text": build_gemma3n,
}

#: top-level wrapper model_type -> the text model_type when text_config does not name it
WRAPPER_TEXT_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text", "gemma3n": "gemma3n_text"}


def no_attention(n: int) -> list[LayerSpec]:
    return [NoAttention(i) for i in range(n)]
