"""Shared pieces of the architecture table's rows: field aliases, state rules, patterns and
the rows too large to write inline (:mod:`kvbudget.spec.arch_table` holds the table)."""

from __future__ import annotations

from kvbudget.spec.traits import FieldRule, Pattern, StateRule, Traits


def source_of(name: str) -> str:
    """The transformers file that defines ``name``'s config class."""
    return f"transformers/models/{name}/configuration_{name}.py"


GPT2_ALIASES = {
    "hidden_size": "n_embd",
    "num_attention_heads": "n_head",
    "num_hidden_layers": "n_layer",
    "max_position_embeddings": "n_positions",
}

#: FalconH1Config: ``mamba_d_ssm`` null means ``mamba_expand * hidden_size``; ``mamba_d_head``
#: "auto" (the default) means that intermediate size // ``mamba_n_heads`` (``__post_init__``)
_FALCON_H1_INNER: FieldRule = ("or", "mamba_d_ssm", ("mul", "mamba_expand", "hidden_size"))
MAMBA2_FALCON_H1 = StateRule(
    "mamba2",
    {
        "conv_kernel": "mamba_d_conv",
        "intermediate_size": _FALCON_H1_INNER,
        "state_size": "mamba_d_state",
        "n_groups": "mamba_n_groups",
        "num_heads": "mamba_n_heads",
        "head_dim": ("or", "mamba_d_head", ("div", _FALCON_H1_INNER, "mamba_n_heads")),
    },
    {
        "mamba_d_conv": 4,
        "mamba_d_ssm": 1024,
        "mamba_expand": 2,
        "mamba_d_state": 256,
        "mamba_n_groups": 1,
        "mamba_n_heads": 128,
        "mamba_d_head": "auto",
    },
)
MAMBA2_GRANITE = StateRule(
    "mamba2",
    {
        "conv_kernel": "mamba_d_conv",
        "intermediate_size": ("mul", "mamba_expand", "hidden_size"),
        "state_size": "mamba_d_state",
        "n_groups": "mamba_n_groups",
        "num_heads": "mamba_n_heads",
        "head_dim": "mamba_d_head",
    },
    {"mamba_d_conv": 4, "mamba_expand": 2, "mamba_d_state": 256, "mamba_n_groups": 1},
)
MAMBA2_NEMOTRON_H = StateRule(
    "mamba2",
    {
        "conv_kernel": "conv_kernel",
        "intermediate_size": ("mul", "mamba_num_heads", "mamba_head_dim"),
        "state_size": "ssm_state_size",
        "n_groups": "n_groups",
        "num_heads": "mamba_num_heads",
        "head_dim": "mamba_head_dim",
    },
)
GDN = StateRule(
    "gdn",
    {
        "conv_kernel": "linear_conv_kernel_dim",
        "num_heads": "linear_num_value_heads",
        "head_dim": "linear_value_head_dim",
        "num_k_heads": "linear_num_key_heads",
        "head_k_dim": "linear_key_head_dim",
    },
    {"linear_conv_kernel_dim": 4},
)
MAMBA1 = StateRule(
    "mamba",
    {
        "conv_kernel": "conv_kernel",
        "intermediate_size": "intermediate_size",
        "state_size": "state_size",
    },
    {"conv_kernel": 4, "state_size": 16},
)
#: Kimi Delta Attention: conv over q, k and v (3 x heads x head_dim) and a (heads, head_dim,
#: head_dim) recurrent state (modeling_kimi_linear.py KimiDeltaAttention; vLLM kda_state_shape)
KDA = StateRule(
    "kda",
    {
        "conv_kernel": "linear_conv_kernel_dim",
        "num_heads": "linear_num_heads",
        "head_dim": "linear_head_dim",
        "num_k_heads": "linear_num_heads",
        "head_k_dim": "linear_head_dim",
    },
    {"linear_conv_kernel_dim": 4, "linear_num_heads": 32, "linear_head_dim": 128},
)
#: Zamba2Config: Mamba-2 of n_mamba_heads heads of mamba_expand * hidden_size / n_mamba_heads
#: (``mamba_headdim``, derived in ``__post_init__``), mamba_ngroups groups
_MAMBA2_ZAMBA2_INNER: FieldRule = ("mul", "mamba_expand", "hidden_size")
MAMBA2_ZAMBA2 = StateRule(
    "mamba2",
    {
        "conv_kernel": "mamba_d_conv",
        "intermediate_size": _MAMBA2_ZAMBA2_INNER,
        "state_size": "mamba_d_state",
        "n_groups": "mamba_ngroups",
        "num_heads": "n_mamba_heads",
        "head_dim": ("div", _MAMBA2_ZAMBA2_INNER, "n_mamba_heads"),
    },
    {
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_d_state": 64,
        "mamba_ngroups": 1,
        "n_mamba_heads": 8,
    },
)
SHORTCONV = StateRule(
    "shortconv", {"conv_kernel": "conv_L_cache", "intermediate_size": "hidden_size"}
)

GEMMA4 = Pattern("sliding_unless_nth", "sliding_window_pattern", 6, last_is_other=True)
GEMMA4_GLOBAL = ("global_head_dim", 512, "num_global_key_value_heads", "attention_k_eq_v")
SWA4 = Pattern("sliding_unless_nth", "sliding_window_pattern", 4)

DEEPSEEK_V4 = Traits(
    source_of("deepseek_v4"),
    defaults={
        "num_hidden_layers": 43,
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "num_key_value_heads": 1,
        "head_dim": 512,
        "sliding_window": 128,
    },
    index_key="index_head_dim",
    compressed=True,
)


MINIMAX_M3 = Traits(
    "transformers/models/minimax_m3_vl/configuration_minimax_m3_vl.py",
    index_key="index_head_dim",
)


#: Inkling (transformers' InklingTextConfig; vLLM's OG-format inkling_model below reuses it)
INKLING = Traits(
    source_of("inkling"),
    aliases={"sliding_window": "sliding_window_size", "conv_kernel_size": "sconv_kernel_size"},
    defaults={
        "num_hidden_layers": 66,
        "hidden_size": 6144,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "swa_num_key_value_heads": 16,
        "swa_head_dim": 128,
        "sliding_window": 512,
        "conv_kernel_size": 4,
    },
    sconv_hybrid=True,
)

#: model_type -> traits (verified against transformers' cache; see the module docstring)


#: top-level wrapper model_type -> the text model_type when text_config does not name it
WRAPPER_TEXT_TYPES = {
    "gemma3": "gemma3_text",
    "llama4": "llama4_text",
    "gemma3n": "gemma3n_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
    "mistral3": "mistral",
    "gemma4": "gemma4_text",
    "gemma4_unified": "gemma4_unified_text",
    "dots3_note": "dots3_note_text",
    "qwen4_exp": "qwen4_exp_text",
    "deepseek_v41": "deepseek_v41_text",
    # MiniMax-M3's VL wrapper (NVIDIA's NVFP4 export saves a text_config without model_type):
    # transformers' MiniMaxM3VLTextConfig (configuration_minimax_m3_vl.py line 55)
    "minimax_m3_vl": "minimax_m3_vl_text",
}
