"""Tiny variants of transformers' default configs, shared by the oracle tests and the recorder.

``default_config(model_type)`` is transformers' own default (``AutoConfig.for_model``);
``tiny_config(model_type)`` shrinks its sizes (layers, hidden size, heads, experts, vocabulary,
windows) through the same config class, so that every derived field (``layer_types``,
``head_dim`` defaults, patterns) is recomputed by transformers itself, not by kvbudget. The
result is a plain ``config.json`` dict with ``architectures`` set to the causal-LM class.

Only transformers is imported here (no kvbudget), so ``scripts/record_vllm_pools.py`` can load
this file from vLLM's own venv.
"""

from __future__ import annotations

from typing import Any

#: generic shrinking applied when the default config has the key (value or callable of the default)
GENERIC: dict[str, Any] = {
    "num_hidden_layers": 8,
    "n_layer": 8,
    "num_layers": 8,
    "n_layers": 8,
    "hidden_size": 256,
    "n_embd": 256,
    "d_model": 256,
    "num_attention_heads": 4,
    "n_head": 4,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 512,
    "ffn_hidden_size": 512,
    "n_inner": 512,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "n_group": 1,
    "topk_group": 1,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "sliding_window": 128,
    "attention_chunk_size": 256,
    "first_k_dense_replace": 1,
    "tie_word_embeddings": False,
}

#: per model type: extra overrides (or ``None`` to keep a generic key at its default)
SPECIFIC: dict[str, dict[str, Any]] = {
    # DbrxConfig's own names (d_model, n_heads, max_seq_len) and nested attn_config; vLLM reads
    # int(attn_config.rope_theta) (models/dbrx.py line 204)
    "dbrx": {
        "n_heads": 4,
        "max_seq_len": 4096,
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0},
    },
    # an attention layer every 4th (the default lists mamba layers only)
    "zamba2": {"num_hidden_layers": None},
    # the wrapper keeps its default layer count, head_dim and hidden size (its vision and audio
    # adapters must match it): the default per_layer_config (its
    # sliding layers' SWA sizes, diffs from the text config) is carried over unchanged
    "dots3_note": {"num_hidden_layers": None, "head_dim": None, "hidden_size": None},
    "dots3_note_text": {
        "num_key_value_heads": 4
    },  # its hybrid_layer_ids / block types follow the default
    "mamba2": {"num_heads": 8, "head_dim": 64, "n_groups": 1},
    # GPTBigCodeConfig has no num_key_value_heads field: __post_init__ derives it from
    # multi_query (1, or n_head); setting it would leave a stray value beside multi_query=True
    # that vLLM 0.32 reads (model_arch_config_convertor.py get_total_num_kv_heads) and
    # transformers' modeling ignores (kv_heads = 1 if multi_query)
    "gpt_bigcode": {"num_key_value_heads": None},
    "lfm2": {"layer_types": ["conv", "conv", "full_attention"]},
    "lfm2_moe": {"layer_types": ["conv", "conv", "full_attention"]},
    "granitemoehybrid": {"layer_types": ["linear_attention"] * 3 + ["full_attention"]},
    "gemma3n": {"num_kv_shared_layers": 3, "activation_sparsity_pattern": [0.95] * 2 + [0.0] * 6},
    "gemma3n_text": {
        "num_kv_shared_layers": 3,
        "activation_sparsity_pattern": [0.95] * 2 + [0.0] * 6,
    },
    # the full layers (every 6th) keep a larger head_dim, as the real checkpoints' global layers
    "gemma4_text": {"per_layer_config": {"05": {"head_dim": 128}, "07": {"head_dim": 128}}},
    "gemma4": {"per_layer_config": {"05": {"head_dim": 128}, "07": {"head_dim": 128}}},
    "gemma4_unified": {"per_layer_config": {"05": {"head_dim": 128}, "07": {"head_dim": 128}}},
}

#: per-layer lists the config classes derive from the layer count when given as None
PER_LAYER_LISTS = (
    "layer_types",
    "no_rope_layers",
    "moe_layers",
    "mlp_layer_types",
    "layers_block_type",
)

TOKEN_ID_KEYS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
)


def _shrunk(defaults: dict[str, Any], model_type: str) -> dict[str, Any]:
    specific = SPECIFIC.get(model_type, {})
    out: dict[str, Any] = {}
    for key, value in GENERIC.items():
        if key in defaults and key not in specific:
            if key in ("sliding_window", "attention_chunk_size") and defaults[key] is None:
                continue
            out[key] = value
    if defaults.get("kv_lora_rank") and "num_key_value_heads" in out:
        out["num_key_value_heads"] = out.get("num_attention_heads", 4)  # MLA: KV heads = heads
    out.update({k: v for k, v in specific.items() if v is not None})
    n = out.get("num_hidden_layers", 8)
    if isinstance(out.get("layer_types"), list) and len(out["layer_types"]) < n:
        pattern = out["layer_types"]
        out["layer_types"] = [pattern[i % len(pattern)] for i in range(n)]
    for key in TOKEN_ID_KEYS:
        if isinstance(defaults.get(key), int) and defaults[key] >= 1024:
            out[key] = 1
        elif isinstance(defaults.get(key), list):
            out[key] = [1]
    for key in PER_LAYER_LISTS:
        if isinstance(defaults.get(key), list) and key not in specific:
            out[key] = None  # recomputed by the config class for the new layer count
    return out


def build_config(model_type: str, *, tiny: bool) -> Any:
    """The transformers config object (text config for multimodal wrappers)."""
    import transformers

    config = transformers.AutoConfig.for_model(model_type)
    if not tiny:
        return config
    text = config.get_text_config(decoder=True)
    overrides = _shrunk(text.to_dict(), model_type)
    if text is config:
        return transformers.AutoConfig.for_model(model_type, **overrides)
    text_dict = {**text.to_dict(), **overrides}
    text_dict.pop("layer_types", None) if overrides.get("layer_types", 0) is None else None
    return transformers.AutoConfig.for_model(model_type, text_config=text_dict)


#: model types whose config nests sub-configs as plain dicts (DBRX: DbrxAttentionConfig,
#: DbrxFFNConfig)
NESTED_SUB_CONFIGS: dict[str, tuple[str, ...]] = {"dbrx": ("attn_config", "ffn_config")}
SUB_CONFIG_BOOKKEEPING = ("_name_or_path", "output_attentions", "transformers_version")


def config_dict(model_type: str, *, tiny: bool, architecture: str) -> dict[str, Any]:
    """``config.json`` content for ``model_type`` with ``architectures`` and bfloat16."""
    config = build_config(model_type, tiny=tiny)
    config.architectures = [architecture]
    out: dict[str, Any] = config.to_dict()
    for key in NESTED_SUB_CONFIGS.get(model_type, ()):
        # a nested sub-config's to_dict() carries the base class's bookkeeping keys, which the
        # strict sub-config class refuses on load ("Found unknown kwargs"; vLLM's transformers)
        if isinstance(out.get(key), dict):
            out[key] = {k: v for k, v in out[key].items() if k not in SUB_CONFIG_BOOKKEEPING}
    out["torch_dtype"] = "bfloat16"
    out.pop("dtype", None)
    return out
