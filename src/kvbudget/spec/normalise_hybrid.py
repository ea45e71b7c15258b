"""transformers' config normalisation for the state-hybrid families.

Nemotron-H, Zamba2, Kimi-Linear and Inkling: the ``__post_init__`` rewrites
:func:`kvbudget.spec.normalise.normalise` applies for these model types (each rule cites its
transformers source; the overview is :mod:`kvbudget.spec.normalise`'s docstring).
"""

from __future__ import annotations

from typing import Any

from kvbudget.errors import SpecError
from kvbudget.spec.normalise_common import Normalised, expected

#: Zamba2Config's default layers_block_type (54 layers)
ZAMBA2_DEFAULT_TYPES = (
    ["linear_attention"]
    + (["linear_attention"] * 5 + ["hybrid"]) * 7
    + ["linear_attention"] * 4
    + ["hybrid"]
    + ["linear_attention"] * 3
    + ["hybrid"]
    + ["linear_attention"] * 2
)

#: ``NemotronHConfig._pattern_to_list``
NEMOTRON_H_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


def nemotron_h(out: Normalised, prefix: str) -> None:
    cfg = out.config
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is None:
        return
    out.consumed.add("hybrid_override_pattern")
    if cfg.get("layers_block_type") is not None or cfg.get("layer_types") is not None:
        out.notes.append(
            "hybrid_override_pattern: ignored, layers_block_type is given (transformers)"
        )
        return
    if (
        not isinstance(pattern, str)
        or not pattern
        or any(c not in NEMOTRON_H_PATTERN for c in pattern)
    ):
        raise expected(prefix, "hybrid_override_pattern", "a string of M, E, * and -", pattern)
    cfg["layers_block_type"] = [NEMOTRON_H_PATTERN[c] for c in pattern]
    cfg.pop("num_hidden_layers", None)
    out.notes.append(
        f"hybrid_override_pattern ({len(pattern)} layers) -> layers_block_type: M Mamba-2, "
        "E MoE, * attention, - MLP (NemotronHConfig._pattern_to_list); num_hidden_layers is its length"
    )


def zamba2(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.update(("num_mem_blocks", "use_shared_attention_adapter", "adapter_rank"))
    hidden, heads = cfg.get("hidden_size", 2560), cfg.get("num_attention_heads", 32)
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (hidden, heads)):
        derived = 2 * hidden // heads
        if cfg.get("attention_head_dim") != derived:
            cfg["attention_head_dim"] = derived
            out.notes.append(
                f"attention_head_dim = 2 x hidden_size / num_attention_heads = {derived} "
                "(Zamba2Config.__post_init__ sets it whatever the config says)"
            )
    if cfg.get("layers_block_type") is None and cfg.get("layer_types") is None:
        cfg["layers_block_type"] = list(ZAMBA2_DEFAULT_TYPES)
        out.notes.append("layers_block_type: Zamba2Config's 54-layer default")
    # hybrid_layer_ids is derived from layers_block_type (transformers recomputes it)
    out.consumed.add("hybrid_layer_ids")
    types = cfg.get("layers_block_type") or cfg.get("layer_types")
    given = cfg.get("hybrid_layer_ids")
    if isinstance(types, list) and given is not None:
        want = [i for i, t in enumerate(types) if t == "hybrid"]
        if list(given) != want:
            raise SpecError(
                f"{prefix}hybrid_layer_ids: {str(given)[:60]} but layers_block_type puts the "
                f"hybrid layers at {str(want)[:60]}; fix one of them",
                field="hybrid_layer_ids",
            )


def kimi_linear(out: Normalised, prefix: str) -> None:
    cfg = out.config
    linear = cfg.get("linear_attn_config")
    if linear is None:
        return
    out.consumed.add("linear_attn_config")
    if not isinstance(linear, dict):
        raise expected(prefix, "linear_attn_config", "a mapping", linear)
    for flat, key in (
        ("linear_head_dim", "head_dim"),
        ("linear_num_heads", "num_heads"),
        ("linear_conv_kernel_dim", "short_conv_kernel_size"),
    ):
        if key in linear:
            cfg[flat] = linear[key]
    full, kda = linear.get("full_attn_layers"), linear.get("kda_layers")
    n = cfg.get("num_hidden_layers")
    if cfg.get("layer_types") is None and full is not None and kda is not None:
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            return  # the reader reports num_hidden_layers
        types: list[Any] = [None] * n
        for kind, listed in (("full_attention", full), ("linear_attention", kda)):
            for one in listed if isinstance(listed, list) else [listed]:
                if isinstance(one, bool) or not isinstance(one, int) or not 1 <= one <= n:
                    raise SpecError(
                        f"{prefix}linear_attn_config: layer {one!r} is not in 1..{n} (1-indexed)",
                        field="linear_attn_config",
                    )
                types[one - 1] = kind
        if None in types:
            raise SpecError(
                f"{prefix}linear_attn_config: layer {types.index(None) + 1} is in neither "
                "full_attn_layers nor kda_layers; fix the config",
                field="linear_attn_config",
            )
        cfg["layer_types"] = types
    out.notes.append(
        "linear_attn_config flattened: head_dim, num_heads, short_conv_kernel_size -> linear_*; "
        "full_attn_layers / kda_layers (1-indexed) -> layer_types (KimiLinearConfig)"
    )


def inkling_model(out: Normalised, prefix: str) -> None:
    """vLLM's InklingModelConfig: ``local_layer_ids`` default [] (every layer ``hybrid``), the
    ``swa_*`` sizes default to the global ones (configs.py lines 70-81, 99-100)."""
    cfg = out.config
    for swa, base in (
        ("swa_num_key_value_heads", "num_key_value_heads"),
        ("swa_head_dim", "head_dim"),
    ):
        if cfg.get(swa) is None and cfg.get(base) is not None:
            cfg[swa] = cfg[base]
    if cfg.get("local_layer_ids") is None and cfg.get("layer_types") is None:
        cfg["local_layer_ids"] = []
        out.notes.append("local_layer_ids: [] (InklingModelConfig's default: no sliding layer)")
    inkling(out, prefix)


def inkling(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.add("local_layer_ids")
    n = cfg.get("num_hidden_layers", 66)
    if cfg.get("layer_types") is None and isinstance(n, int) and not isinstance(n, bool) and n > 0:
        local = cfg.get("local_layer_ids")
        if local is not None and not isinstance(local, list):
            raise expected(prefix, "local_layer_ids", "a list of layer indices", local)
        ids = set(local) if local is not None else {i for i in range(n) if (i + 1) % 6}
        cfg["layer_types"] = ["hybrid_sliding" if i in ids else "hybrid" for i in range(n)]
        out.notes.append(
            "layer_types derived as InklingTextConfig does: hybrid_sliding on "
            + ("local_layer_ids" if local is not None else "every layer but each 6th")
            + ", hybrid elsewhere"
        )
    types = cfg.get("layer_types")
    if isinstance(types, list) and "hybrid_sliding" not in types:
        out.consumed.update(("swa_num_key_value_heads", "swa_head_dim"))
