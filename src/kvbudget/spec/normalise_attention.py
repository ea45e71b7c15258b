"""transformers' config normalisation for attention-only families.

Gemma-4, MiMo-V2-Flash and DBRX: the ``__post_init__`` rewrites
:func:`kvbudget.spec.normalise.normalise` applies for these model types (each rule cites its
transformers source; the overview is :mod:`kvbudget.spec.normalise`'s docstring).
"""

from __future__ import annotations

from kvbudget.errors import SpecError
from kvbudget.spec.normalise_common import Normalised, expected


def gemma4(out: Normalised, prefix: str) -> None:
    types = out.config.get("layer_types")
    if isinstance(types, list) and types and types[-1] != "full_attention":
        out.config["layer_types"] = [*types[:-1], "full_attention"]
        out.notes.append("layer_types: the last layer forced to full_attention (Gemma4TextConfig)")


def mimo_v2_flash(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.update(
        (
            "hybrid_layer_pattern",
            "sliding_window_size",
            "swa_num_key_value_heads",
            "swa_head_dim",
            "swa_v_head_dim",
            "swa_num_attention_heads",
            "attention_chunk_size",
        )
    )
    n = cfg.get("num_hidden_layers", 48)
    if cfg.get("layer_types") is None and isinstance(n, int) and not isinstance(n, bool) and n > 0:
        cfg["layer_types"] = [
            "full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention"
            for i in range(n)
        ]
        out.notes.append("layer_types derived as MiMoV2FlashConfig does (full on 0 and every 6th)")
        pattern = cfg.get("hybrid_layer_pattern")
        if pattern is not None:
            want = [0 if t == "full_attention" else 1 for t in cfg["layer_types"]]
            if pattern != want:
                raise SpecError(
                    f"{prefix}hybrid_layer_pattern: vLLM reads it but transformers derives its "
                    "own layer_types (full on 0 and every 6th layer), and they differ; add "
                    "layer_types to the config",
                    field="hybrid_layer_pattern",
                )
    size = cfg.get("sliding_window_size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        cfg["sliding_window"] = size + 1
        out.notes.append(
            f"sliding_window = sliding_window_size + 1 = {size + 1} (MiMoV2FlashConfig: the "
            "query attends sliding_window_size previous tokens plus itself)"
        )
    kv = cfg.get("num_key_value_heads", 4)
    checks = (
        ("swa_num_key_value_heads", 2 * kv if isinstance(kv, int) else None),
        ("swa_head_dim", cfg.get("head_dim", 192)),
        ("swa_v_head_dim", cfg.get("v_head_dim", 128)),
    )
    for key, want_value in checks:
        if cfg.get(key) is not None and cfg[key] != want_value:
            raise SpecError(
                f"{prefix}{key}: {cfg[key]!r} but transformers' MiMoV2FlashAttention builds "
                f"{want_value!r} for the sliding layers; kvbudget follows transformers and refuses "
                "a config where the two differ",
                field=key,
            )


def dbrx(out: Normalised, prefix: str) -> None:
    cfg = out.config
    attn = cfg.get("attn_config")
    if attn is not None and not isinstance(attn, dict):
        raise expected(prefix, "attn_config", "a mapping", attn)
    out.consumed.add("attn_config")
    kv = (attn or {}).get("kv_n_heads", 1)
    if cfg.get("num_key_value_heads", kv) != kv or "num_key_value_heads" not in cfg:
        out.notes.append(
            f"num_key_value_heads = attn_config.kv_n_heads = {kv}"
            + ("" if attn and "kv_n_heads" in attn else " (DbrxAttentionConfig's default)")
            + " (DbrxConfig.__post_init__ sets it whatever the config says)"
        )
    cfg["num_key_value_heads"] = kv
