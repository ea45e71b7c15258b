"""Helpers shared by the architecture builders: attention dims, layer types, provenance."""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.errors import SpecError
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layer_runs import LayerSeq, Runs
from kvbudget.spec.layers import ChunkedLocal, FullAttention, LayerSpec, SlidingWindow
from kvbudget.spec.provenance import SourceKind

ARCH: SourceKind = "architecture_default"

#: layer types as runs (``Runs.periodic`` for a pattern, ``Runs.from_items`` for a listed one)
Types = Runs[str]


def nth_types(n: int, every: int, offset: int, other: str, base: str) -> Types:
    """Layer ``i`` is ``other`` when ``i % every == offset``, else ``base``.

    Stored as one period repeated when ``every`` is small, else period by period: either way
    at most about ``sqrt(n)`` entries, whatever ``n`` and ``every`` are.
    """
    every = max(1, every)
    if not 0 <= offset < every:
        return Runs.periodic([base], n)
    if every * every <= n:
        return Runs.periodic([base] * offset + [other] + [base] * (every - offset - 1), n)
    parts: list[tuple[tuple[str, ...], int]] = []
    for start in range(0, n, every):
        parts += [((base,), offset), ((other,), 1), ((base,), every - offset - 1)]
        if start + every > n:
            break
    total = 0
    clipped: list[tuple[tuple[str, ...], int]] = []
    for pattern, length in parts:
        length = min(length, n - total)
        clipped.append((pattern, length))
        total += length
    return Runs.concat(clipped)


def split_types(n: int, first: int, before: str, after: str) -> Types:
    """``before`` for layers below ``first``, ``after`` from there on."""
    first = min(max(first, 0), n)
    return Runs.concat([((before,), first), ((after,), n - first)])


def listed_types(r: FieldReader, value: Sequence[str], n: int) -> Types:
    """A ``layer_types`` list the config gives (already O(n) input), compressed by runs."""
    return check_types(r, Runs.from_items(value), n)


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


def check_types(r: FieldReader, types: Types, n: int) -> Types:
    if len(types) != n:
        raise SpecError(
            f"{r.prefix}layer_types: has {len(types)} entries but num_hidden_layers is {n}; fix the config",
            field="layer_types",
        )
    return types


def explicit_types(r: FieldReader, n: int) -> Types | None:
    if not r.has("layer_types"):
        return None
    value = r.get("layer_types")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(
            f"{r.prefix}layer_types: expected a list of strings, got {value!r}", field="layer_types"
        )
    return listed_types(r, value, n)


def derived_types(r: FieldReader, types: Types, note: str) -> Types:
    r.record("layer_types", summarize(types), ARCH, note=note)
    return types


def summarize(types: Types) -> str:
    counts: dict[str, int] = {}
    for t, indices in types.runs():
        counts[t] = counts.get(t, 0) + len(indices)
    return ", ".join(f"{k} x{v}" for k, v in counts.items())


def sliding_window(r: FieldReader) -> int | None:
    return r.get_int("sliding_window", note="window of the sliding layers")


def attention_layers(
    r: FieldReader, types: Types, dims: tuple[int, int], *, chunk: int | None = None
) -> LayerSeq | None:
    """Head-based attention layers, one template per run of ``types``."""
    kv, head_dim = dims
    distinct = types.distinct()
    window = sliding_window(r) if "sliding_attention" in distinct else None
    if "sliding_attention" in distinct and window is None:
        return None
    if "chunked_attention" in distinct and chunk is None:
        return None

    def build(t: str, i: int) -> LayerSpec:
        if t == "sliding_attention":
            assert window is not None
            return SlidingWindow(i, kv, head_dim, sliding_window=window)
        if t == "chunked_attention":
            assert chunk is not None
            return ChunkedLocal(i, kv, head_dim, attention_chunk_size=chunk)
        if t in ("full_attention", "attention"):
            return FullAttention(i, kv, head_dim)
        raise SpecError(
            f"{r.prefix}layer_types[{i}]: {t!r} is not an attention type kvbudget models",
            field="layer_types",
        )

    return LayerSeq.from_runs(types, build)


def num_layers(r: FieldReader) -> int | None:
    return r.get_int("num_hidden_layers", note="decoder layers")
