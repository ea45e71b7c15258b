"""Config fields checked against the type and range transformers gives them, before any use.

A contradictory config must be refused, never coerced into a number: ``intermediate_size:
-14336`` (a negative parameter count), ``tie_word_embeddings: "false"`` (a non-empty string reads
as true), ``max_position_embeddings: -1`` (a division by zero in plan), a RoPE ``factor`` of -8,
0 or 1e300. The types are those of transformers' config classes (``PreTrainedConfig`` and the
model classes, 5.x: ``int`` sizes, ``bool`` flags); the RoPE factor rule is transformers'
``modeling_rope_utils.py`` ("factor field must be a float or int >= 1"), and every value has the
upper bound of ``docs/limits.md``. Each refusal is one line naming the field, the value and the fix.
"""

from __future__ import annotations

import math
from typing import Any

from kvbudget.errors import SpecError
from kvbudget.safety.limits import MAX_TOKENS
from kvbudget.spec.fields import int_field_bound

#: ``bool`` in transformers' config classes; a string or a number there is refused
BOOL_KEYS = (
    "tie_word_embeddings",
    "use_sliding_window",
    "attention_k_eq_v",
    "multi_query",
    "new_decoder_architecture",
)
#: positive ``int`` sizes kvbudget reads for weights, context and KV
POSITIVE_INT_KEYS = (
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "moe_intermediate_size",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
)
#: counts where 0 is meaningful (no shared expert, no shared KV layer; a window of 0 that no
#: layer uses, as Qwen2-MoE's default config carries beside use_sliding_window false; a shared
#: expert of size 0, as the published Qwen3-Coder-480B-A35B-Instruct config carries)
NON_NEGATIVE_INT_KEYS = (
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "num_shared_experts",
    "num_kv_shared_layers",
    "sliding_window",
    "attention_chunk_size",
)
ROPE_KEYS = ("rope_scaling", "rope_parameters")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config_fields(cfg: dict[str, Any], prefix: str = "") -> None:
    """Refuse a field whose type or range transformers would not give it (see the module doc)."""
    for key in BOOL_KEYS:
        value = cfg.get(key)
        if value is not None and not isinstance(value, bool):
            raise SpecError(
                f"{prefix}{key}: expected true or false, got {_show(value)} "
                f"({type(value).__name__}); transformers types it bool and kvbudget does not "
                f"guess; fix the config or --set {key}=true|false",
                field=key,
            )
    for key in POSITIVE_INT_KEYS + NON_NEGATIVE_INT_KEYS:
        value = cfg.get(key)
        if value is None:
            continue
        low = 0 if key in NON_NEGATIVE_INT_KEYS else 1
        items = value if key == "intermediate_size" and isinstance(value, list) else [value]
        for item in items:
            if not _is_int(item) or item < low:
                wanted = "an integer >= 0" if low == 0 else "a positive integer"
                raise SpecError(
                    f"{prefix}{key}: expected {wanted}, got {_show(value)}; fix the config or "
                    f"--set {key}=N",
                    field=key,
                )
            if item > int_field_bound(key):
                raise SpecError(
                    f"{prefix}{key}: {str(item)[:40]} is beyond the limit of "
                    f"{int_field_bound(key):,} (docs/limits.md); fix the config or --set {key}=N",
                    field=key,
                )
    check_rope_fields(cfg, prefix)


def check_rope_fields(cfg: dict[str, Any], prefix: str = "") -> None:
    """The RoPE blocks alone (``fingerprint`` reads them for the position-encoding identity)."""
    for key in ROPE_KEYS:
        _check_rope(cfg.get(key), f"{prefix}{key}", key, depth=0)


def _check_rope(value: Any, where: str, key: str, depth: int) -> None:
    """Every ``factor`` in a RoPE block (Gemma-4 nests one per layer type) is a number in
    ``[1, MAX_TOKENS]``."""
    if not isinstance(value, dict) or depth > 2:
        return
    for name, item in value.items():
        if isinstance(item, dict):
            _check_rope(item, f"{where}.{name}", key, depth + 1)
        elif name == "factor" and item is not None:
            number = _is_int(item) or isinstance(item, float)
            if not number or not math.isfinite(item) or not 1 <= item <= MAX_TOKENS:
                raise SpecError(
                    f"{where}.factor: expected a number from 1 to {MAX_TOKENS:,} (transformers: "
                    f"'factor field must be a float or int >= 1'), got {_show(item)}; fix the "
                    "config",
                    field=key,
                )
