"""The one architecture table: how kvbudget reads each ``model_type``'s layers.

Every supported ``model_type`` has one :class:`~kvbudget.spec.traits.Traits` row here: the
transformers file that defines its config class, the field aliases and defaults that class
applies, the rule that derives ``layer_types``, what each state layer stores. Most rows are read
by the generic reader (:func:`kvbudget.spec.arch_generic.build_from_traits`); a row whose
structure no field describes carries a hand-written ``builder``
(:mod:`kvbudget.spec.architectures`, :mod:`kvbudget.spec.arch_hybrid`,
:mod:`kvbudget.spec.arch_nas`), which reads it instead. A ``model_type`` with no row falls back to
:data:`~kvbudget.spec.traits.GENERIC`.
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.spec.arch_dsv41 import DSV41_SOURCE, build_deepseek_v41
from kvbudget.spec.arch_hybrid import (
    build_gemma3n,
    build_jamba,
    build_mamba,
    build_minimax,
    build_qwen3_next,
)
from kvbudget.spec.arch_nas import build_nemotron_nas
from kvbudget.spec.arch_rows import (
    DEEPSEEK_V4,
    GDN,
    GEMMA4,
    GEMMA4_GLOBAL,
    GPT2_ALIASES,
    INKLING,
    KDA,
    MAMBA1,
    MAMBA2_FALCON_H1,
    MAMBA2_GRANITE,
    MAMBA2_NEMOTRON_H,
    MAMBA2_ZAMBA2,
    MINIMAX_M3,
    SHORTCONV,
    SWA4,
    source_of,
)
from kvbudget.spec.architectures import build_dense, build_llama4, build_mla
from kvbudget.spec.traits import Pattern, Traits

_ROWS: dict[str, Traits] = {
    # plain full attention, llama-style fields
    **{
        name: Traits(source_of(name))
        for name in (
            "llama",
            "apertus",
            "arcee",
            "cohere",
            "ernie4_5",
            "ernie4_5_moe",
            "exaone",
            "flex_olmo",
            "glm",
            "glm4",
            "granite",
            "granitemoe",
            "granitemoeshared",
            "hunyuan_v1_dense",
            "hunyuan_v1_moe",
            "hyperclovax",
            "internlm3",
            "jais2",
            "mellum",
            "ministral3",
            "nemotron",
            "olmo",
            "olmo2",
            "olmoe",
            "seed_oss",
            "smollm3",
            "stablelm",
            "minimax_m2",
            "iquestcoder",
            "laguna",
            "hy_v3",
            "afmoe",
            "phi",
            "vaultgemma",
            "qwen3_moe",
            "qwen2_moe",
            "mixtral",
            "qwen3_vl_text",
            "hrm_text",
            "sarvam_moe",
            "qwen3_vl_moe_text",
        )
    },
    "gemma": Traits(source_of("gemma"), defaults={"tie_word_embeddings": True}),
    # transformers' default Glm4MoeConfig has no head_dim and 4096 / 96 heads; the attention
    # takes hidden_size // num_attention_heads = 42 (modeling_glm4_moe.py Glm4MoeAttention)
    "glm4_moe": Traits(source_of("glm4_moe"), head_dim_floor=True),
    "gemma2": Traits(
        source_of("gemma2"),
        pattern=Pattern("sliding_unless_nth", None, 2),
        defaults={"sliding_window": 4096},
    ),
    "gpt_oss": Traits(source_of("gpt_oss"), pattern=Pattern("sliding_unless_nth", None, 2)),
    "gemma3_text": Traits(
        source_of("gemma3"), pattern=Pattern("sliding_unless_nth", "sliding_window_pattern", 6)
    ),
    "cohere2": Traits(source_of("cohere2"), pattern=SWA4),
    "cohere2_moe": Traits(source_of("cohere2_moe"), pattern=SWA4),
    "exaone4": Traits(source_of("exaone4"), pattern=SWA4),
    "exaone_moe": Traits(source_of("exaone_moe"), pattern=SWA4),
    "olmo3": Traits(source_of("olmo3"), pattern=Pattern("sliding_unless_nth", None, 4)),
    "cwm": Traits(source_of("cwm"), pattern=Pattern("nth_from_zero", "window_pattern", 4)),
    "granite_swa": Traits(source_of("granite_swa"), pattern=Pattern("nth_from_zero", None, 4)),
    "granitemoe_swa": Traits(
        source_of("granitemoe_swa"), pattern=Pattern("nth_from_zero", None, 4)
    ),
    "mistral": Traits(source_of("mistral"), pattern=Pattern("window_all")),
    "ministral": Traits(source_of("ministral"), pattern=Pattern("window_all")),
    "starcoder2": Traits(source_of("starcoder2"), pattern=Pattern("window_all")),
    "phi3": Traits(source_of("phi3"), pattern=Pattern("window_all")),
    "qwen2": Traits(source_of("qwen2"), pattern=Pattern("qwen")),
    "qwen3": Traits(source_of("qwen3"), pattern=Pattern("qwen")),
    # GPT-2 family: attribute_map aliases
    "gpt2": Traits(source_of("gpt2"), aliases=GPT2_ALIASES),
    "gpt-sw3": Traits(source_of("gpt_sw3"), aliases=GPT2_ALIASES),
    "gpt_bigcode": Traits(
        source_of("gpt_bigcode"), aliases=GPT2_ALIASES, multi_query_key="multi_query"
    ),
    "gpt_neox": Traits(source_of("gpt_neox")),
    "gptj": Traits(
        source_of("gptj"),
        aliases={
            "hidden_size": "n_embd",
            "num_attention_heads": "n_head",
            "num_hidden_layers": "n_layer",
            "max_position_embeddings": "n_positions",
        },
    ),
    "falcon": Traits(
        source_of("falcon"),
        aliases={"num_key_value_heads": "num_kv_heads"},
        multi_query_key="multi_query",
        multi_query_unless="new_decoder_architecture",
        kv_heads_default=None,
        note="new_decoder_architecture: num_kv_heads; else multi_query: 1 KV head; else all heads",
    ),
    "gemma4_text": Traits(source_of("gemma4"), pattern=GEMMA4, global_dims=GEMMA4_GLOBAL),
    # MiniMax-M3 (text decoder of transformers' minimax_m3_vl): full attention; sparse layers
    # also cache the lightning indexer's key, one head of index_head_dim per token
    # (modeling_minimax_m3_vl.py MiniMaxM3VLSparseCacheLayer.update_index)
    "minimax_m3": MINIMAX_M3,
    # vLLM 0.32's own MiniMaxM3TextConfig (vllm/transformers_utils/configs/minimax_m3.py line 15:
    # model_type "minimax_m3_text", the text_config of its "minimax_m3_vl"): the same fields
    "minimax_m3_text": MINIMAX_M3,
    # transformers' own name for that text config (configuration_minimax_m3_vl.py line 55,
    # MiniMaxM3VLTextConfig.model_type, the text_config a saved minimax_m3_vl config carries):
    # the same fields, written flat (index_head_dim, layer_types) by transformers
    "minimax_m3_vl_text": MINIMAX_M3,
    "gemma4_unified_text": Traits(
        source_of("gemma4_unified"), pattern=GEMMA4, global_dims=GEMMA4_GLOBAL
    ),
    # DBRX: d_model / n_heads / n_layers (attribute_map); the KV heads live in
    # attn_config.kv_n_heads (DbrxAttentionConfig, default 1; normalise.py flattens it) and the
    # head size is d_model // n_heads (modeling_dbrx.py DbrxAttention lines 172-181)
    "dbrx": Traits(
        source_of("dbrx"),
        aliases={
            "hidden_size": "d_model",
            "num_attention_heads": "n_heads",
            "num_hidden_layers": "n_layers",
            "max_position_embeddings": "max_seq_len",
        },
        defaults={"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16},
        head_dim_floor=True,
    ),
    "bloom": Traits(
        source_of("bloom"),
        aliases={"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
    ),
    "opt": Traits(source_of("opt"), aliases={"hidden_size": "hidden_size"}),
    # MLA
    **{
        name: Traits(source_of(name), mla=True)
        for name in (
            "deepseek_v2",
            "deepseek_v3",
            "glm4_moe_lite",
            "minicpm3",
            "axk1",
            "sarvam_mla",
        )
    },
    # MLA plus the DSA lightning indexer's key ([batch, seq, index_head_dim]) on every
    # indexed_attention layer (modeling_deepseek_v32.py / modeling_glm_moe_dsa.py
    # ``cache.update_indexer``); GLM-5.2's "shared" indexer layers reuse the previous top-k
    "deepseek_v32": Traits(
        source_of("deepseek_v32"),
        mla=True,
        pattern=Pattern("full", base="indexed_attention"),
        index_key="index_head_dim",
    ),
    "glm_moe_dsa": Traits(
        source_of("glm_moe_dsa"),
        mla=True,
        pattern=Pattern("full", base="indexed_attention"),
        index_key="index_head_dim",
        indexer_types_key="indexer_types",
    ),
    # Hunyuan v4: the same MLA + DSA indexer cache (modeling_hy_v4.py: cache.update(k_pass, k_rot)
    # and cache.update_indexer on layers whose indexer_types entry is "full"); hyper-connections
    # (hc_*) and the output gate / sink cache nothing
    "hy_v4": Traits(
        source_of("hy_v4"),
        mla=True,
        pattern=Pattern("full", base="indexed_attention"),
        index_key="index_head_dim",
        indexer_types_key="indexer_types",
    ),
    # DeepSeek-V4: one shared K=V head of head_dim on every layer; sliding_attention layers keep
    # a window (DynamicSlidingWindowLayer, K and V as two tensors), compressed layers a window of
    # the shared head plus compressed entries (modeling_deepseek_v4.py DeepseekV4HCACache /
    # DeepseekV4CSACache); layer_types from compress_ratios or the V4-Pro default (normalise.py)
    "deepseek_v4": DEEPSEEK_V4,
    # SGLang's DeepSeek-V4 checkpoints name model_type "deepseek_ref" (architecture
    # DeepseekV4ForCausalLM, the class vLLM and SGLang load); transformers has no such type, so
    # DeepseekV4Config's rules apply unverified: a structural reference
    "deepseek_ref": replace(
        DEEPSEEK_V4,
        source="transformers/models/deepseek_v4/configuration_deepseek_v4.py (deepseek_ref has "
        "no transformers class)",
        verified=False,
    ),
    # Inkling: every layer is attention plus four short convolutions (K, V, attention input, MLP
    # input) whose conv states transformers keeps in float32 (modeling_inkling.py
    # InklingAttention lines 182-202, InklingDecoderLayer lines 554-559); "hybrid" layers use
    # num_key_value_heads x head_dim, "hybrid_sliding" ones swa_num_key_value_heads x
    # swa_head_dim over sliding_window_size (attribute_map: sliding_window)
    "inkling_text": INKLING,
    # vLLM's own Inkling format (the "OG" checkpoint config, model_type inkling_model): the same
    # layers under vLLM's InklingModelConfig (vllm/models/inkling/configs.py lines 14-137: HF
    # conv_kernel_size == OG sconv_kernel_size, local_layer_ids default [] = no sliding layer);
    # no transformers class: a structural reference
    "inkling_model": replace(
        INKLING,
        defaults={
            "num_hidden_layers": 16,
            "hidden_size": 1536,
            "num_attention_heads": 12,
            "num_key_value_heads": 4,
            "sliding_window": 512,
            "conv_kernel_size": 4,
        },
        source="vllm/models/inkling/configs.py InklingModelConfig (no transformers class)",
        verified=False,
    ),
    # Dots3-Note: MLA on every layer; indexed_attention layers also keep the DSA indexer's key
    # in float32 (modeling_dots3_note.py lines 746-752 build the indexed layers' cos/sin from
    # inputs_embeds.float(); the indexer's rotated key, lines 262-266, is float32), the
    # sliding_attention layers a window of latents of their own per_layer_config sizes (SWA
    # kv_lora_rank 1024 by default; configuration_dots3_note.py lines 286-338; normalise.py
    # derives layer_types, sliding_window and per_layer_config when a checkpoint omits them)
    **{
        name: Traits(
            source_of("dots3_note"),
            mla=True,
            mla_sliding=True,
            index_key="index_head_dim",
            index_element_bytes=4,
        )
        for name in ("dots3_note", "dots3_note_text")
    },
    # Qwen4-Exp: gated-delta-net linear_attention layers and indexed_attention layers with K/V
    # plus the QSA indexer's raw key (one head of indexer_head_dim per token, model dtype;
    # modeling_qwen4_exp.py Qwen4ExpTextQSAIndexer lines 688-733, which needs the indexer_*
    # fields: no default); the ple_layer_ids layers keep a second conv state (the PLE short
    # convolution, lines 1198-1237; its n-gram context, state 2, holds token ids, no floats)
    "qwen4_exp_text": Traits(
        source_of("qwen4_exp"),
        linear=GDN,
        index_key="indexer_head_dim",
        index_default=None,
        ple_layers_key="ple_layer_ids",
        defaults={
            "num_hidden_layers": 40,
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "hc_count": 4,
            "ple_conv_kernel_size": 4,
            "ngram_size": 3,
        },
    ),
    # Kimi-Linear: MLA full-attention layers between KDA linear-attention layers; default
    # layer_types: full when i and i % 4 == 0 (KimiLinearConfig.__post_init__)
    "kimi_linear": Traits(
        source_of("kimi_linear"),
        mla=True,
        linear=KDA,
        pattern=Pattern("nth_from_zero", None, 4, base="linear_attention", first_is_base=True),
    ),
    "longcat_flash": Traits(
        source_of("longcat_flash"), mla=True, aliases={"num_hidden_layers": "num_layers"}
    ),
    # hybrids with recurrent state
    "granitemoehybrid": Traits(
        source_of("granitemoehybrid"),
        linear=MAMBA2_GRANITE,
        pattern=Pattern("full", base="linear_attention"),
    ),
    "nemotron_h": Traits(
        source_of("nemotron_h"), layer_types_key="layers_block_type", linear=MAMBA2_NEMOTRON_H
    ),
    "qwen3_5_text": Traits(source_of("qwen3_5"), linear=GDN),
    "qwen3_5_moe_text": Traits(source_of("qwen3_5_moe"), linear=GDN),
    "olmo_hybrid": Traits(source_of("olmo_hybrid"), linear=GDN),
    "falcon_mamba": Traits(
        source_of("falcon_mamba"), mamba=MAMBA1, pattern=Pattern("full", base="mamba")
    ),
    "lfm2": Traits(source_of("lfm2"), conv=SHORTCONV),
    # parallel hybrid: every decoder layer caches attention K/V and a Mamba-2 state
    # (layers_block_type is ["hybrid"] * num_hidden_layers; modeling_falcon_h1.py)
    "falcon_h1": Traits(
        source_of("falcon_h1"),
        hybrid=MAMBA2_FALCON_H1,
        pattern=Pattern("full", base="hybrid"),
        defaults={"num_key_value_heads": 8},
        note="num_key_value_heads: 8 when absent, num_attention_heads when null",
    ),
    "lfm2_moe": Traits(source_of("lfm2_moe"), conv=SHORTCONV),
    # Zamba2: Mamba-2 layers ("linear_attention") and "hybrid" layers where a shared transformer
    # block runs before the Mamba-2 mixer; each hybrid layer caches its own K/V (num_key_value_heads
    # x attention_head_dim = 2 * hidden_size / num_attention_heads) and a Mamba-2 state
    # (transformers LinearAttentionAndFullAttentionLayer; configuration_zamba2.py __post_init__)
    "zamba2": Traits(
        source_of("zamba2"),
        layer_types_key="layers_block_type",
        aliases={"head_dim": "attention_head_dim"},
        linear=MAMBA2_ZAMBA2,
        hybrid=MAMBA2_ZAMBA2,
    ),
    # MiMo-V2-Flash: full layers num_key_value_heads x (head_dim K + v_head_dim V), sliding layers
    # twice the KV heads (normalise.py derives layer_types and the window)
    "mimo_v2_flash": Traits(source_of("mimo_v2_flash"), sliding_kv_factor=2),
    # Step-3.7-Flash ships the flat text config (Step3p7TextConfig): llama-style fields,
    # layer_types full / sliding (window sliding_window), num_key_value_heads x head_dim on both
    # kinds (modeling_step3p7.py Step3p7Attention; per_layer_config only changes query heads)
    "step3p7": Traits("transformers/models/step3p7/configuration_step3p7.py (Step3p7TextConfig)"),
    # MiMo-7B: no transformers class; vLLM 0.32 serves it as Qwen2 (model_executor/models/mimo.py
    # line 57: MiMoModel(Qwen2Model)); its MTP layers are cached only under speculative decoding
    # (kvbudget.spec.mtp)
    "mimo": Traits(
        "vllm/model_executor/models/mimo.py (Qwen2Model)", pattern=Pattern("qwen"), verified=False
    ),
}


#: rows whose edge rules the dense builder owns (an unused ``sliding_window`` flagged, Qwen's
#: ``use_sliding_window`` / ``max_window_layers``, Mistral's default window)
_DENSE_BUILT = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "phi3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "starcoder2",
)

ARCHITECTURES: dict[str, Traits] = {
    **_ROWS,
    **{name: replace(_ROWS[name], builder=build_dense) for name in _DENSE_BUILT},
    **{name: replace(_ROWS[name], builder=build_mla) for name in ("deepseek_v2", "deepseek_v3")},
    # vLLM reads kimi_k2 with DeepseekV3Config (vllm 0.32.0 transformers_utils/config.py line 100)
    "kimi_k2": Traits(source_of("deepseek_v3"), mla=True, builder=build_mla),
    "llama4_text": Traits(source_of("llama4"), builder=build_llama4),
    "jamba": Traits(source_of("jamba"), builder=build_jamba),
    "mamba": Traits(source_of("mamba"), builder=build_mamba),
    "mamba2": Traits(source_of("mamba2"), builder=build_mamba),
    "qwen3_next": Traits(source_of("qwen3_next"), builder=build_qwen3_next),
    "minimax": Traits(source_of("minimax"), builder=build_minimax),
    "gemma3n_text": Traits(source_of("gemma3n"), builder=build_gemma3n),
    # DeepSeek-V4.1: vLLM 0.32's reading (no transformers class: a structural reference); its
    # DeepseekV41Config flattens text_config, so the nested and the flat config read alike
    "deepseek_v41": Traits(DSV41_SOURCE, builder=build_deepseek_v41, verified=False),
    "deepseek_v41_text": Traits(DSV41_SOURCE, builder=build_deepseek_v41, verified=False),
    # no transformers class to check it against: a structural reference, never ``exact``
    "nemotron-nas": Traits(
        "vllm/model_executor/models/nemotron_nas.py", builder=build_nemotron_nas, verified=False
    ),
}
