"""Helpers shared by the architecture builders: attention dims, layer types, provenance."""

from __future__ import annotations

from kvbudget.errors import SpecError
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layers import (
    ChunkedLocal,
    FullAttention,
    LayerSpec,
    SlidingWindow,
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
    if heads and kv and heads % kv:
        raise SpecError(
            f"{r.prefix}num_key_value_heads: {kv} does not divide num_attention_heads {heads}, so "
            "query heads cannot be grouped (GQA needs heads % kv_heads == 0); fix the config or "
            "--set num_key_value_heads=N with N dividing the query heads",
            field="num_key_value_heads",
        )
    if kv is None or head_dim is None:
        return None
    return kv, head_dim


def check_types(r: FieldReader, types: list[str], n: int) -> list[str]:
    if len(types) != n:
        raise SpecError(
            f"{r.prefix}layer_types: has {len(types)} entries but num_hidden_layers is {n}; fix the config",
            field="layer_types",
        )
    return types


def explicit_types(r: FieldReader, n: int) -> list[str] | None:
    if not r.has("layer_types"):
        return None
    value = r.get("layer_types")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(
            f"{r.prefix}layer_types: expected a list of strings, got {value!r}", field="layer_types"
        )
    return check_types(r, list(value), n)


def derived_types(r: FieldReader, types: list[str], note: str) -> list[str]:
    r.record("layer_types", summarize(types), ARCH, note=note)
    return types


def summarize(types: list[str]) -> str:
    counts: dict[str, int] = {}
    for t in types:
        counts[t] = counts.get(t, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in counts.items())


def sliding_window(r: FieldReader) -> int | None:
    return r.get_int("sliding_window", note="window of the sliding layers")


def attention_layers(
    r: FieldReader, types: list[str], dims: tuple[int, int], *, chunk: int | None = None
) -> list[LayerSpec] | None:
    kv, head_dim = dims
    window = sliding_window(r) if "sliding_attention" in types else None
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


def num_layers(r: FieldReader) -> int | None:
    return r.get_int("num_hidden_layers", note="decoder layers")
