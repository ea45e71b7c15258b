"""transformers' own config normalisation, applied before the trait table reads a field.

A published ``config.json`` and transformers' default config of the same ``model_type`` must give
the same answer, so the renames and derivations transformers' configuration classes perform in
``__post_init__`` (transformers 5.x, cited per rule) are applied to a copy of the config first:

* every model type: legacy layer kinds are renamed (``configuration_utils.py``
  ``_LEGACY_LAYER_TYPE_REMAP``: ``mamba`` -> ``linear_attention``, ``attention`` ->
  ``full_attention``, ``deepseek_sparse_attention`` -> ``indexed_attention``) in ``layer_types``
  and ``layers_block_type`` (Granite-4.0-H, Nemotron-3 checkpoints);
* ``nemotron_h``: ``hybrid_override_pattern`` (``M``/``E``/``*``/``-``) becomes
  ``layers_block_type`` (``configuration_nemotron_h.py`` ``_pattern_to_list``), and the number of
  layers is its length (``num_hidden_layers`` is ignored there);
* ``gemma4_text`` / ``gemma4_unified_text``: the last layer is full attention
  (``configuration_gemma4.py``; its full layers' own head size and KV heads are the trait row's
  ``global_dims``);
* ``minimax_m3`` (and vLLM's own ``minimax_m3_text``, transformers' ``minimax_m3_vl_text``):
  ``sparse_attention_config`` is flattened
  (``sparse_index_dim`` -> ``index_head_dim``, ``sparse_attention_freq`` -> ``layer_types`` with
  ``minimax_m3_sparse``; ``configuration_minimax_m3_vl.py``);
* ``glm_moe_dsa``: ``indexer_types`` derived from ``index_topk_pattern`` or
  ``index_topk_freq``/``index_skip_topk_offset`` when absent (``configuration_glm_moe_dsa.py``).
* ``zamba2``: ``attention_head_dim = 2 * hidden_size // num_attention_heads`` always, and the
  54-layer default ``layers_block_type`` when absent (``configuration_zamba2.py`` ``__post_init__``
  lines 111-139); ``num_mem_blocks`` and the shared-attention adapters are weights, not cache;
* ``hy_v4``: ``indexer_types`` derived when absent: "full" on layer 0 and every 4th from layer 1
  (``configuration_hy_v4.py`` ``__post_init__`` lines 151-155);
* ``mimo_v2_flash``: ``layer_types`` full on layer 0 and every 6th layer, sliding elsewhere, and
  ``sliding_window = sliding_window_size + 1`` when the config gives ``sliding_window_size``
  (``configuration_mimo_v2_flash.py`` ``__post_init__`` lines 111-132); the checkpoint's own
  ``hybrid_layer_pattern`` (vLLM reads it) and ``swa_*`` sizes must agree with what transformers
  builds (sliding layers: ``2 x num_key_value_heads`` KV heads of ``head_dim``/``v_head_dim``,
  ``modeling_mimo_v2_flash.py`` ``MiMoV2FlashAttention`` lines 340-359), else the config is refused.
* ``dbrx``: ``attn_config.kv_n_heads`` (``DbrxAttentionConfig``, default 1) becomes
  ``num_key_value_heads`` (``configuration_dbrx.py`` line 153; ``modeling_dbrx.py``
  ``DbrxAttention`` line 181); the other
  ``attn_config`` keys (``clip_qkv``, ``rope_theta``, ``attn_pdrop``) cache nothing;
* ``inkling_text``: ``layer_types`` from ``local_layer_ids`` (those ``hybrid_sliding``, the
  rest ``hybrid``), else ``hybrid`` on every 6th layer and ``hybrid_sliding`` elsewhere
  (``InklingTextConfig.__post_init__``, ``configuration_inkling.py`` lines 157-165); without a
  sliding layer the ``swa_*`` sizes are read by nothing and cache nothing;
* ``deepseek_v4``: ``compress_rates`` defaults to CSA 4 / HCA 128 with the legacy
  ``compress_rate_csa`` / ``compress_rate_hca`` folded in; ``layer_types`` from the legacy
  per-layer ``compress_ratios`` (0 sliding, 4 CSA, 128 HCA), else the V4-Pro default (2 HCA, then
  CSA / HCA alternating), cut to ``num_hidden_layers`` (published configs list one more ratio, for
  the MTP layer); ``DeepseekV4Config.__post_init__``, ``configuration_deepseek_v4.py`` lines
  257-274. ``DeepseekV4Attention`` caches one K=V head whatever ``num_key_value_heads`` says
  (``modeling_deepseek_v4.py`` lines 789 and 800), so another value is read as 1.
* ``dots3_note`` / ``dots3_note_text``: ``sliding_window`` from ``sliding_window_size`` (512),
  ``layer_types`` (indexed, or full when ``use_dsa`` is false, on layers 0, 1 and i % 4 == 1,
  sliding elsewhere unless ``use_sliding_window`` is false), legacy ``full_attention`` DSA layers
  renamed, and the sliding layers' ``per_layer_config`` from the ``swa_*`` keys
  (``configuration_dots3_note.py`` lines 286-338);
* ``qwen4_exp_text``: ``layer_types`` indexed_attention every ``full_attention_interval`` (4)
  layers, linear elsewhere; ``full_attention`` entries are indexed (``configuration_qwen4_exp.py``
  lines 172-182).

Each rewrite is returned as a note for the ledger, and the keys it consumed are named so the
structural-field guard (:mod:`kvbudget.spec.resolve`) counts them as read.
The rules live per family in :mod:`kvbudget.spec.normalise_attention`,
:mod:`kvbudget.spec.normalise_hybrid` and :mod:`kvbudget.spec.normalise_sparse`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvbudget.spec.normalise_attention import dbrx, gemma4, mimo_v2_flash
from kvbudget.spec.normalise_common import Normalised
from kvbudget.spec.normalise_hybrid import inkling, inkling_model, kimi_linear, nemotron_h, zamba2
from kvbudget.spec.normalise_sparse import (
    deepseek_v4,
    dots3_note,
    glm_moe_dsa,
    hy_v4,
    minimax_m3,
    qwen4_exp,
)

#: transformers ``configuration_utils._LEGACY_LAYER_TYPE_REMAP`` (5.x)
LEGACY_LAYER_TYPES = {
    "mamba": "linear_attention",
    "attention": "full_attention",
    "deepseek_sparse_attention": "indexed_attention",
    "qwen_sparse_attention": "indexed_attention",
}


def normalise(model_type: str, cfg: dict[str, Any], prefix: str = "") -> Normalised:
    """Apply transformers' ``__post_init__`` renames and derivations for ``model_type``."""
    out = Normalised(dict(cfg))
    for key in ("layer_types", "layers_block_type"):
        value = out.config.get(key)
        if isinstance(value, list) and any(_legacy(v) for v in value):
            out.config[key] = [LEGACY_LAYER_TYPES[v] if _legacy(v) else v for v in value]
            out.notes.append(
                f"{key}: legacy kinds renamed as transformers does ({_renames(value)})"
            )
    rule = _RULES.get(model_type)
    if rule is not None:
        rule(out, prefix)
    return out


def _legacy(value: Any) -> bool:
    return isinstance(value, str) and value in LEGACY_LAYER_TYPES


def _renames(value: list[Any]) -> str:
    seen = sorted({v for v in value if _legacy(v)})
    return ", ".join(f"{v} -> {LEGACY_LAYER_TYPES[v]}" for v in seen)


_RULES: dict[str, Callable[[Normalised, str], None]] = {
    "dots3_note": dots3_note,
    "dots3_note_text": dots3_note,
    "qwen4_exp_text": qwen4_exp,
    "dbrx": dbrx,
    "inkling_text": inkling,
    "inkling_model": inkling_model,
    "deepseek_v4": deepseek_v4,
    "deepseek_ref": deepseek_v4,
    "kimi_linear": kimi_linear,
    "nemotron_h": nemotron_h,
    "gemma4_text": gemma4,
    "gemma4_unified_text": gemma4,
    "minimax_m3": minimax_m3,
    "minimax_m3_text": minimax_m3,
    "minimax_m3_vl_text": minimax_m3,
    "glm_moe_dsa": glm_moe_dsa,
    "mimo_v2_flash": mimo_v2_flash,
    "hy_v4": hy_v4,
    "zamba2": zamba2,
}
