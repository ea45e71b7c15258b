"""Hybrid architectures: Mamba (Jamba), gated delta net (Qwen3-Next), lightning attention
(MiniMax) and KV sharing (Gemma-3n). Rules mirror transformers' configuration classes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

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
    summarize,
)
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import FullAttention, KVShared, LayerSpec
from kvbudget.spec.state_layers import StateLayer


def build_jamba(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """Jamba: attention when i % attn_layer_period == attn_layer_offset, Mamba elsewhere."""
    n = num_layers(r)
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
    at = offset if isinstance(offset, int) and not isinstance(offset, bool) else -1
    types = nth_types(n, period, at, "attention", "mamba")
    mamba = StateLayer(0, "mamba", conv_kernel=d_conv, intermediate_size=inner, state_size=d_state)
    out = LayerSeq.from_runs(
        types,
        lambda t, i: FullAttention(i, *dims) if t == "attention" else replace(mamba, layer_index=i),
    )
    r.record(
        "layer_types",
        summarize(types.map(lambda t, _: "full" if t == "attention" else "state")),
        "derived",
        note=f"attention at i % {period} == {offset}",
    )
    return out


def build_qwen3_next(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """Qwen3-Next: gated-delta-net linear attention, full attention every Nth layer."""
    n = num_layers(r)
    dims = attention_dims(r)
    if n is None:
        return None
    types = explicit_types(r, n)
    if types is None:
        interval = r.get_int("full_attention_interval", default=4, default_source=ARCH)
        assert interval is not None
        types = derived_types(
            r,
            nth_types(n, interval, interval - 1, "full_attention", "linear_attention"),
            f"full every {interval}th",
        )
    kernel = r.get_int("linear_conv_kernel_dim")
    k_dim = r.get_int("linear_key_head_dim")
    k_heads = r.get_int("linear_num_key_heads")
    v_heads = r.get_int("linear_num_value_heads")
    v_dim = r.get_int("linear_value_head_dim")
    if dims is None or None in (kernel, k_dim, k_heads, v_heads, v_dim):
        return None
    gdn = StateLayer(
        0,
        "gdn",
        conv_kernel=kernel or 0,
        num_heads=v_heads or 0,
        head_dim=v_dim or 0,
        num_k_heads=k_heads or 0,
        head_k_dim=k_dim or 0,
    )
    return LayerSeq.from_runs(
        types,
        lambda t, i: (
            replace(gdn, layer_index=i) if t == "linear_attention" else FullAttention(i, *dims)
        ),
    )


def build_minimax(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """MiniMax-Text-01: lightning (linear) attention with softmax attention layers in between."""
    n = num_layers(r)
    dims = attention_dims(r)
    heads = r.peek("num_attention_heads")
    if n is None or dims is None or heads is None:
        return None
    types = explicit_types(r, n)
    if types is None:
        types = derived_types(
            r,
            nth_types(n, 2, 1, "linear_attention", "full_attention"),
            "minimax default alternation",
        )
    return LayerSeq.from_runs(
        types,
        lambda t, i: (
            StateLayer(i, "linear", num_heads=int(heads), head_dim=dims[1])
            if t == "linear_attention"
            else FullAttention(i, *dims)
        ),
    )


def build_gemma3n(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """Gemma-3n: sliding/full layers; the last ``num_kv_shared_layers`` reuse earlier KV."""
    n = num_layers(r)
    dims = attention_dims(r)
    if n is None or dims is None:
        return None
    types = explicit_types(r, n)
    if types is None:
        types = derived_types(
            r,
            nth_types(n, 5, 4, "full_attention", "sliding_attention"),
            "gemma3n: every 5th full",
        )
    shared = r.get_int("num_kv_shared_layers", default=15, default_source=ARCH, required=False) or 0
    base = attention_layers(r, types, dims)
    if base is None:
        return None
    first_shared = max(0, n - shared)
    return with_shared_kv(r, base, types, first_shared)


def with_shared_kv(r: FieldReader, base: LayerSeq, types: Types, first: int) -> LayerSeq:
    """Layers ``first..`` reuse the KV of the last earlier layer of their type (per run)."""
    if first >= len(base):
        return base
    sources = types[:first].last_index()
    shared = types[first:]
    for t, indices in shared.runs():
        if t not in sources:
            raise SpecError(
                f"{r.prefix}layer_types: shared layer {indices[0]} ({t}) has no earlier layer of "
                "that type",
                field="layer_types",
            )
    tail = LayerSeq.from_runs(shared, lambda t, i: KVShared(i, sources[t], base[sources[t]].kind))
    return LayerSeq.chain([base[:first], tail])


def build_mamba(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """Pure Mamba (``mamba``) and Mamba2 (``mamba2``) models: every layer holds a state.

    ``intermediate_size = expand * hidden_size`` (transformers ``MambaConfig``/``Mamba2Config``);
    Mamba2 conv channels add ``2 * n_groups * state_size`` and its state is
    ``(num_heads, head_dim, state_size)``.
    """
    n = num_layers(r)
    hidden = r.get_int("hidden_size")
    expand = r.get_int("expand", default=2, default_source=ARCH)
    state = r.get_int(
        "state_size", default=16 if model_type == "mamba" else 128, default_source=ARCH
    )
    kernel = r.get_int("conv_kernel", default=4, default_source=ARCH)
    if None in (n, hidden, expand, state, kernel):
        return None
    assert n and hidden and expand and state and kernel
    inner = expand * hidden
    r.derive("mamba_intermediate_size", inner, f"expand * hidden_size = {expand} * {hidden}")
    if model_type == "mamba":
        r.record("layer_types", f"mamba x{n}", "derived", note="every layer is a Mamba block")
        return LayerSeq.periodic(
            [StateLayer(0, "mamba", conv_kernel=kernel, intermediate_size=inner, state_size=state)],
            n,
        )
    heads = r.get_int("num_heads")
    head_dim = r.get_int("head_dim", default=64, default_source=ARCH)
    groups = r.get_int("n_groups", default=8, default_source=ARCH)
    if heads is None or head_dim is None or groups is None:
        return None
    r.record("layer_types", f"mamba2 x{n}", "derived", note="every layer is a Mamba2 block")
    return LayerSeq.periodic(
        [
            StateLayer(
                0,
                "mamba2",
                conv_kernel=kernel,
                intermediate_size=inner,
                state_size=state,
                n_groups=groups,
                num_heads=heads,
                head_dim=head_dim,
            )
        ],
        n,
    )
