"""Layer structure of each supported architecture, read from its config with provenance.

Every rule here mirrors the architecture's own definition in Hugging Face transformers
(``models/<name>/configuration_<name>.py``, 5.x): which layers slide, which are chunked, which
hold a recurrent state, which reuse another layer's KV. Each builder returns the layer list or
``None`` when a required field is missing (the reader lists it).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.errors import SpecError
from kvbudget.spec.arch_common import (
    ARCH,
    Types,
    attention_dims,
    attention_layers,
    derived_types,
    explicit_types,
    nth_types,
    num_layers,
    split_types,
    summarize,
)
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layer_runs import LayerSeq, Runs
from kvbudget.spec.layers import MLA, LayerSpec


def build_dense(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """Llama, Mistral, Mixtral, Qwen2/3, Phi-3, Gemma 1/2/3, gpt-oss: full and sliding layers."""
    n = num_layers(r)
    dims = attention_dims(r)
    if n is None or dims is None:
        return None
    types = explicit_types(r, n)
    if types is None:
        types = _default_dense_types(r, model_type, n)
        if types is None:
            return None
    return attention_layers(r, types, dims)


def _default_dense_types(r: FieldReader, model_type: str, n: int) -> Types | None:
    if model_type in ("gemma2", "gpt_oss"):
        types = nth_types(n, 2, 1, "full_attention", "sliding_attention")
        return derived_types(
            r, types, f"{model_type}: sliding and full layers alternate (sliding first)"
        )
    if model_type == "gemma3_text":
        pattern = r.get_int(
            "sliding_window_pattern", default=6, default_source=ARCH, note="every Nth layer is full"
        )
        if pattern is None:
            return None
        types = nth_types(n, pattern, pattern - 1, "full_attention", "sliding_attention")
        return derived_types(
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
        return derived_types(r, Runs.periodic([kind], n), note)
    window = r.peek("sliding_window")
    if window is not None:
        _unused_window(
            r,
            window,
            f"{model_type} defines no sliding layers but the config carries sliding_window={window}; kvbudget "
            "keeps every layer full (the larger figure); give --set layer_types=[...] if the window applies",
        )
    return derived_types(
        r, Runs.periodic(["full_attention"], n), f"{model_type}: every layer is full attention"
    )


def _unused_window(r: FieldReader, window: object, conflict: str) -> None:
    """Record a ``sliding_window`` the config carries but no layer uses, and flag the conflict."""
    r.record(
        "sliding_window", window, r.config_source, location=f"{r.location}:{r.prefix}sliding_window"
    )
    r.flag_conflict("sliding_window", conflict)


def _qwen_types(r: FieldReader, n: int) -> Types:
    use = r.get("use_sliding_window", default=False, default_source=ARCH, required=False)
    window = r.peek("sliding_window")
    if not use:
        if window is not None:
            _unused_window(
                r,
                window,
                f"sliding_window={window} is present but use_sliding_window=false: no layer slides "
                "(use_sliding_window wins, as in transformers and vLLM)",
            )
        return derived_types(
            r,
            Runs.periodic(["full_attention"], n),
            "use_sliding_window is false: every layer is full",
        )
    first = r.get_int(
        "max_window_layers",
        default=0,
        default_source=ARCH,
        note="layers below this index stay full",
    )
    start = first or 0
    types = split_types(n, start, "full_attention", "sliding_attention")
    return derived_types(
        r, types, f"use_sliding_window: layers >= max_window_layers ({start}) slide"
    )


def build_llama4(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """Llama 4: RoPE layers use chunked local attention, every 4th (NoPE) layer is full."""
    n = num_layers(r)
    dims = attention_dims(r)
    if n is None or dims is None:
        return None
    chunk = r.get_int(
        "attention_chunk_size", default=None, required=False, note="chunk of the local layers"
    )
    types = explicit_types(r, n)
    if types is None:
        if r.has("no_rope_layers"):
            listed = r.get("no_rope_layers")
            if not isinstance(listed, list) or len(listed) != n:
                raise SpecError(
                    f"{r.prefix}no_rope_layers: expected {n} 0/1 entries, got {listed!r}",
                    field="no_rope_layers",
                )
            flags: Runs[int] = Runs.from_items(listed)
        else:
            interval = r.get_int(
                "no_rope_layer_interval",
                default=4,
                default_source=ARCH,
                note="every Nth layer is NoPE/global",
            )
            assert interval is not None
            flags = nth_types(n, interval, interval - 1, "0", "1").map(lambda f, _: int(f))
            r.record(
                "no_rope_layers",
                summarize(flags.map(lambda f, _: str(f))),
                ARCH,
                note=f"int((i+1) % {interval} != 0)",
            )
        types = flags.map(
            lambda f, _: "chunked_attention" if f and chunk is not None else "full_attention"
        )
        r.record(
            "layer_types",
            summarize(types),
            "derived",
            note="RoPE layers chunked, NoPE layers full",
        )
    return attention_layers(r, types, dims, chunk=chunk)


def build_mla(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """DeepSeek-V2/V3 (and Kimi-K2): every layer caches one latent of kv_lora_rank + rope dims."""
    n = num_layers(r)
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
    for key, value in (("qk_nope_head_dim", nope), ("v_head_dim", v_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(
                f"{r.prefix}{key}: expected a non-negative integer, got {str(value)[:40]!r}; "
                f"fix the config or --set {key}=N",
                field=key,
            )
    if n is None or rank is None or rope is None:
        return None
    return LayerSeq.periodic([MLA(0, rank, rope, int(nope), int(v_dim), heads or 0)], n)
