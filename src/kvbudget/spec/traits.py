"""Declarative architecture traits: which config field says what, as transformers defines it.

One :class:`Traits` row per ``model_type`` replaces a hand-written builder: the transformers file
that defines the config class (``models/<name>/configuration_<name>.py``, 5.x), the
``attribute_map`` aliases (canonical name -> the key the config really uses), the defaults the
class applies when ``config.json`` omits a key, the rule that derives ``layer_types`` when the
config does not list them, and what a ``linear_attention`` / ``mamba`` / ``conv`` layer stores.
:mod:`kvbudget.spec.arch_generic` turns a row plus a config into layers.

``verified=True`` rows were checked byte for byte against transformers' returned cache (the
``hf`` oracle, ``tests/peer/test_hf_oracle.py``) and, where vLLM's CPU engine starts them, against
vLLM's logged pool (``tests/peer/test_vllm_pool_oracle.py``); their results are ``exact``. A
``model_type`` with no row whose config uses only known vocabulary resolves through
:data:`GENERIC` as ``structural_reference`` with a ledger line saying its rules are unverified.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

#: ``layer_types`` vocabulary kvbudget maps (transformers ``cache_utils`` layer types)
ATTENTION_TYPES = {
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "sliding_attention": "sliding",
    "local": "sliding",
    "chunked_attention": "chunked",
}
STATE_TYPES = ("linear_attention", "mamba", "conv")
#: a decoder layer holding full attention and a recurrent state side by side (Falcon-H1)
HYBRID_TYPES = ("hybrid",)
#: Inkling: attention plus short-convolution states, full (``hybrid``) or sliding
#: (``hybrid_sliding``, transformers ``LinearAttentionAndSlidingWindowAttentionLayer``)
SCONV_HYBRID_TYPES = ("hybrid", "hybrid_sliding")
NO_CACHE_TYPES = ("mlp", "moe", "dense", "sparse")
#: full attention (or MLA) plus a sparse-attention indexer's key cache (transformers
#: ``DynamicIndexedLayer``; MiniMax-M3's ``MiniMaxM3VLSparseCacheLayer``): needs ``Traits.index_key``
INDEXED_TYPES = ("indexed_attention", "minimax_m3_sparse")
#: DeepSeek-V4 compressed attention: a sliding K=V window plus compressed entries
#: (``modeling_deepseek_v4.py`` ``DeepseekV4HCACache`` / ``DeepseekV4CSACache``); needs
#: ``Traits.compressed``. The CSA layers also keep an indexer key per compressed entry.
COMPRESSED_TYPES = ("heavily_compressed_attention", "compressed_sparse_attention")

#: a field value: a config key, ("mul", key, key), ("div", key, key), ("const", n) or
#: ("or", key, rule): the key's value, or the rule when the key is null or "auto"
FieldRule = str | tuple[str, Any, Any] | tuple[str, Any]


@dataclass(frozen=True, slots=True)
class StateRule:
    """What one state layer stores: the :class:`~kvbudget.spec.layers.StateLayer` fields.

    ``fields`` maps a StateLayer field (``conv_kernel``, ``intermediate_size``, ``state_size``,
    ``n_groups``, ``num_heads``, ``head_dim``, ``num_k_heads``, ``head_k_dim``) to a config key
    or a small expression; ``defaults`` are the config class's defaults for omitted keys.
    """

    state_kind: str  # mamba | mamba2 | gdn | linear | shortconv
    fields: dict[str, FieldRule]
    defaults: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pattern:
    """How ``layer_types`` is derived when the config does not list it.

    kinds: ``full`` (every layer full), ``window_all`` (every layer slides when
    ``sliding_window`` is set), ``qwen`` (``use_sliding_window`` + ``max_window_layers``),
    ``sliding_unless_nth`` (layer i is ``other`` when ``(i+1) % N == 0`` else ``base``),
    ``nth_from_zero`` (layer i is ``other`` when ``i % N == 0`` else ``base``),
    ``period_offset`` (``other`` when ``i % N == offset`` else ``base``; Jamba).
    """

    kind: str = "full"
    key: str | None = None  # config key holding N
    default: int | None = None
    base: str = "sliding_attention"
    other: str = "full_attention"
    offset_key: str | None = None
    offset_default: int = 0
    last_is_other: bool = False  # the last layer is always ``other`` (Gemma-4)
    first_is_base: bool = False  # layer 0 is always ``base`` (Kimi-Linear)


@dataclass(frozen=True, slots=True)
class Traits:
    """One architecture as its transformers config class defines it."""

    source: str
    aliases: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    kv_heads_default: str | None = "num_attention_heads"  # when num_key_value_heads is omitted
    multi_query_key: str | None = None  # a bool key meaning "one KV head" (GPT-BigCode, Falcon)
    multi_query_unless: str | None = None  # a bool key that switches multi_query off (Falcon)
    pattern: Pattern = field(default_factory=Pattern)
    mla: bool = False
    linear: StateRule | None = None  # what a "linear_attention" layer stores
    mamba: StateRule | None = None  # what a "mamba" layer stores
    conv: StateRule | None = None  # what a "conv" layer stores (LFM2 short convolution)
    hybrid: StateRule | None = None  # the state beside the attention of a "hybrid" layer
    layer_types_key: str = "layer_types"
    #: head_dim absent: ``hidden_size // num_attention_heads`` even when it does not divide (the
    #: modeling code's ``getattr(config, "head_dim", hidden_size // num_attention_heads)``)
    head_dim_floor: bool = False
    #: full-attention layers use their own (head_dim key, default, kv-heads key, gate key) when
    #: the config has no per_layer_config (Gemma-4: global_head_dim, num_global_key_value_heads
    #: when attention_k_eq_v; Gemma4TextConfig.__post_init__)
    global_dims: tuple[str, int, str, str] | None = None
    #: sliding layers cache this many times ``num_key_value_heads`` KV heads (MiMo-V2-Flash: 2,
    #: ``modeling_mimo_v2_flash.py`` line 341)
    sliding_kv_factor: int = 1
    #: config key of the indexer's cached key size (one head per token) for INDEXED_TYPES layers
    index_key: str | None = None
    #: the config class's default for ``index_key`` (None: no default, the key is required)
    index_default: int | None = 128
    #: bytes per indexer-key element when the model keeps the key in its own dtype (Dots3-Note:
    #: 4, float32); 0 = the cache dtype
    index_element_bytes: int = 0
    #: ``sliding_attention`` layers of an MLA model are sliding MLA layers (Dots3-Note), their
    #: latent sizes from ``per_layer_config``
    mla_sliding: bool = False
    #: config key listing the (1-indexed) linear-attention layers that keep a second conv state,
    #: Qwen4-Exp's PLE short convolution (``hc_count x hidden_size`` channels over
    #: ``(ple_conv_kernel_size - 1) x ngram_size`` tokens)
    ple_layers_key: str | None = None
    #: per-layer "full"/"shared" list: only "full" layers run (and cache) an indexer (GLM-5.2)
    indexer_types_key: str | None = None
    #: SCONV_HYBRID_TYPES layers: attention (sliding ones with the ``swa_*`` heads) plus four
    #: float32 short-convolution states (Inkling)
    sconv_hybrid: bool = False
    #: COMPRESSED_TYPES layers are modelled (DeepSeek-V4: rates from ``compress_rates``)
    compressed: bool = False
    verified: bool = True
    note: str = ""


def _t(name: str) -> str:
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
_MAMBA2_FALCON_H1 = StateRule(
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
_MAMBA2_GRANITE = StateRule(
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
_MAMBA2_NEMOTRON_H = StateRule(
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
_GDN = StateRule(
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
_MAMBA1 = StateRule(
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
_KDA = StateRule(
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
_MAMBA2_ZAMBA2 = StateRule(
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
_SHORTCONV = StateRule(
    "shortconv", {"conv_kernel": "conv_L_cache", "intermediate_size": "hidden_size"}
)

_GEMMA4 = Pattern("sliding_unless_nth", "sliding_window_pattern", 6, last_is_other=True)
_GEMMA4_GLOBAL = ("global_head_dim", 512, "num_global_key_value_heads", "attention_k_eq_v")
_SWA4 = Pattern("sliding_unless_nth", "sliding_window_pattern", 4)

_DEEPSEEK_V4 = Traits(
    _t("deepseek_v4"),
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


#: the model types of MiniMax-M3's text decoder: the published config, vLLM 0.32's own
#: ``MiniMaxM3TextConfig`` and transformers' ``MiniMaxM3VLTextConfig``
MINIMAX_M3_TYPES = frozenset({"minimax_m3", "minimax_m3_text", "minimax_m3_vl_text"})

_MINIMAX_M3 = Traits(
    "transformers/models/minimax_m3_vl/configuration_minimax_m3_vl.py",
    index_key="index_head_dim",
)


#: Inkling (transformers' InklingTextConfig; vLLM's OG-format inkling_model below reuses it)
_INKLING = Traits(
    _t("inkling"),
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
TRAITS: dict[str, Traits] = {
    # plain full attention, llama-style fields
    **{
        name: Traits(_t(name))
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
    "gemma": Traits(_t("gemma"), defaults={"tie_word_embeddings": True}),
    # transformers' default Glm4MoeConfig has no head_dim and 4096 / 96 heads; the attention
    # takes hidden_size // num_attention_heads = 42 (modeling_glm4_moe.py Glm4MoeAttention)
    "glm4_moe": Traits(_t("glm4_moe"), head_dim_floor=True),
    "gemma2": Traits(
        _t("gemma2"),
        pattern=Pattern("sliding_unless_nth", None, 2),
        defaults={"sliding_window": 4096},
    ),
    "gpt_oss": Traits(_t("gpt_oss"), pattern=Pattern("sliding_unless_nth", None, 2)),
    "gemma3_text": Traits(
        _t("gemma3"), pattern=Pattern("sliding_unless_nth", "sliding_window_pattern", 6)
    ),
    "cohere2": Traits(_t("cohere2"), pattern=_SWA4),
    "cohere2_moe": Traits(_t("cohere2_moe"), pattern=_SWA4),
    "exaone4": Traits(_t("exaone4"), pattern=_SWA4),
    "exaone_moe": Traits(_t("exaone_moe"), pattern=_SWA4),
    "olmo3": Traits(_t("olmo3"), pattern=Pattern("sliding_unless_nth", None, 4)),
    "cwm": Traits(_t("cwm"), pattern=Pattern("nth_from_zero", "window_pattern", 4)),
    "granite_swa": Traits(_t("granite_swa"), pattern=Pattern("nth_from_zero", None, 4)),
    "granitemoe_swa": Traits(_t("granitemoe_swa"), pattern=Pattern("nth_from_zero", None, 4)),
    "mistral": Traits(_t("mistral"), pattern=Pattern("window_all")),
    "ministral": Traits(_t("ministral"), pattern=Pattern("window_all")),
    "starcoder2": Traits(_t("starcoder2"), pattern=Pattern("window_all")),
    "phi3": Traits(_t("phi3"), pattern=Pattern("window_all")),
    "qwen2": Traits(_t("qwen2"), pattern=Pattern("qwen")),
    "qwen3": Traits(_t("qwen3"), pattern=Pattern("qwen")),
    # GPT-2 family: attribute_map aliases
    "gpt2": Traits(_t("gpt2"), aliases=GPT2_ALIASES),
    "gpt-sw3": Traits(_t("gpt_sw3"), aliases=GPT2_ALIASES),
    "gpt_bigcode": Traits(_t("gpt_bigcode"), aliases=GPT2_ALIASES, multi_query_key="multi_query"),
    "gpt_neox": Traits(_t("gpt_neox")),
    "gptj": Traits(
        _t("gptj"),
        aliases={
            "hidden_size": "n_embd",
            "num_attention_heads": "n_head",
            "num_hidden_layers": "n_layer",
            "max_position_embeddings": "n_positions",
        },
    ),
    "falcon": Traits(
        _t("falcon"),
        aliases={"num_key_value_heads": "num_kv_heads"},
        multi_query_key="multi_query",
        multi_query_unless="new_decoder_architecture",
        kv_heads_default=None,
        note="new_decoder_architecture: num_kv_heads; else multi_query: 1 KV head; else all heads",
    ),
    "gemma4_text": Traits(_t("gemma4"), pattern=_GEMMA4, global_dims=_GEMMA4_GLOBAL),
    # MiniMax-M3 (text decoder of transformers' minimax_m3_vl): full attention; sparse layers
    # also cache the lightning indexer's key, one head of index_head_dim per token
    # (modeling_minimax_m3_vl.py MiniMaxM3VLSparseCacheLayer.update_index)
    "minimax_m3": _MINIMAX_M3,
    # vLLM 0.32's own MiniMaxM3TextConfig (vllm/transformers_utils/configs/minimax_m3.py line 15:
    # model_type "minimax_m3_text", the text_config of its "minimax_m3_vl"): the same fields
    "minimax_m3_text": _MINIMAX_M3,
    # transformers' own name for that text config (configuration_minimax_m3_vl.py line 55,
    # MiniMaxM3VLTextConfig.model_type, the text_config a saved minimax_m3_vl config carries):
    # the same fields, written flat (index_head_dim, layer_types) by transformers
    "minimax_m3_vl_text": _MINIMAX_M3,
    "gemma4_unified_text": Traits(
        _t("gemma4_unified"), pattern=_GEMMA4, global_dims=_GEMMA4_GLOBAL
    ),
    # DBRX: d_model / n_heads / n_layers (attribute_map); the KV heads live in
    # attn_config.kv_n_heads (DbrxAttentionConfig, default 1; normalise.py flattens it) and the
    # head size is d_model // n_heads (modeling_dbrx.py DbrxAttention lines 172-181)
    "dbrx": Traits(
        _t("dbrx"),
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
        _t("bloom"), aliases={"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"}
    ),
    "opt": Traits(_t("opt"), aliases={"hidden_size": "hidden_size"}),
    # MLA
    **{
        name: Traits(_t(name), mla=True)
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
        _t("deepseek_v32"),
        mla=True,
        pattern=Pattern("full", base="indexed_attention"),
        index_key="index_head_dim",
    ),
    "glm_moe_dsa": Traits(
        _t("glm_moe_dsa"),
        mla=True,
        pattern=Pattern("full", base="indexed_attention"),
        index_key="index_head_dim",
        indexer_types_key="indexer_types",
    ),
    # Hunyuan v4: the same MLA + DSA indexer cache (modeling_hy_v4.py: cache.update(k_pass, k_rot)
    # and cache.update_indexer on layers whose indexer_types entry is "full"); hyper-connections
    # (hc_*) and the output gate / sink cache nothing
    "hy_v4": Traits(
        _t("hy_v4"),
        mla=True,
        pattern=Pattern("full", base="indexed_attention"),
        index_key="index_head_dim",
        indexer_types_key="indexer_types",
    ),
    # DeepSeek-V4: one shared K=V head of head_dim on every layer; sliding_attention layers keep
    # a window (DynamicSlidingWindowLayer, K and V as two tensors), compressed layers a window of
    # the shared head plus compressed entries (modeling_deepseek_v4.py DeepseekV4HCACache /
    # DeepseekV4CSACache); layer_types from compress_ratios or the V4-Pro default (normalise.py)
    "deepseek_v4": _DEEPSEEK_V4,
    # SGLang's DeepSeek-V4 checkpoints name model_type "deepseek_ref" (architecture
    # DeepseekV4ForCausalLM, the class vLLM and SGLang load); transformers has no such type, so
    # DeepseekV4Config's rules apply unverified: a structural reference
    "deepseek_ref": replace(
        _DEEPSEEK_V4,
        source="transformers/models/deepseek_v4/configuration_deepseek_v4.py (deepseek_ref has "
        "no transformers class)",
        verified=False,
    ),
    # Inkling: every layer is attention plus four short convolutions (K, V, attention input, MLP
    # input) whose conv states transformers keeps in float32 (modeling_inkling.py
    # InklingAttention lines 182-202, InklingDecoderLayer lines 554-559); "hybrid" layers use
    # num_key_value_heads x head_dim, "hybrid_sliding" ones swa_num_key_value_heads x
    # swa_head_dim over sliding_window_size (attribute_map: sliding_window)
    "inkling_text": _INKLING,
    # vLLM's own Inkling format (the "OG" checkpoint config, model_type inkling_model): the same
    # layers under vLLM's InklingModelConfig (vllm/models/inkling/configs.py lines 14-137: HF
    # conv_kernel_size == OG sconv_kernel_size, local_layer_ids default [] = no sliding layer);
    # no transformers class: a structural reference
    "inkling_model": replace(
        _INKLING,
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
            _t("dots3_note"),
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
        _t("qwen4_exp"),
        linear=_GDN,
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
        _t("kimi_linear"),
        mla=True,
        linear=_KDA,
        pattern=Pattern("nth_from_zero", None, 4, base="linear_attention", first_is_base=True),
    ),
    "longcat_flash": Traits(
        _t("longcat_flash"), mla=True, aliases={"num_hidden_layers": "num_layers"}
    ),
    # hybrids with recurrent state
    "granitemoehybrid": Traits(
        _t("granitemoehybrid"),
        linear=_MAMBA2_GRANITE,
        pattern=Pattern("full", base="linear_attention"),
    ),
    "nemotron_h": Traits(
        _t("nemotron_h"), layer_types_key="layers_block_type", linear=_MAMBA2_NEMOTRON_H
    ),
    "qwen3_5_text": Traits(_t("qwen3_5"), linear=_GDN),
    "qwen3_5_moe_text": Traits(_t("qwen3_5_moe"), linear=_GDN),
    "olmo_hybrid": Traits(_t("olmo_hybrid"), linear=_GDN),
    "falcon_mamba": Traits(
        _t("falcon_mamba"), mamba=_MAMBA1, pattern=Pattern("full", base="mamba")
    ),
    "lfm2": Traits(_t("lfm2"), conv=_SHORTCONV),
    # parallel hybrid: every decoder layer caches attention K/V and a Mamba-2 state
    # (layers_block_type is ["hybrid"] * num_hidden_layers; modeling_falcon_h1.py)
    "falcon_h1": Traits(
        _t("falcon_h1"),
        hybrid=_MAMBA2_FALCON_H1,
        pattern=Pattern("full", base="hybrid"),
        defaults={"num_key_value_heads": 8},
        note="num_key_value_heads: 8 when absent, num_attention_heads when null",
    ),
    "lfm2_moe": Traits(_t("lfm2_moe"), conv=_SHORTCONV),
    # Zamba2: Mamba-2 layers ("linear_attention") and "hybrid" layers where a shared transformer
    # block runs before the Mamba-2 mixer; each hybrid layer caches its own K/V (num_key_value_heads
    # x attention_head_dim = 2 * hidden_size / num_attention_heads) and a Mamba-2 state
    # (transformers LinearAttentionAndFullAttentionLayer; configuration_zamba2.py __post_init__)
    "zamba2": Traits(
        _t("zamba2"),
        layer_types_key="layers_block_type",
        aliases={"head_dim": "attention_head_dim"},
        linear=_MAMBA2_ZAMBA2,
        hybrid=_MAMBA2_ZAMBA2,
    ),
    # MiMo-V2-Flash: full layers num_key_value_heads x (head_dim K + v_head_dim V), sliding layers
    # twice the KV heads (normalise.py derives layer_types and the window)
    "mimo_v2_flash": Traits(_t("mimo_v2_flash"), sliding_kv_factor=2),
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

#: traits for a model_type kvbudget has no row for: llama-style field names, layer_types as given
GENERIC = Traits("(none: generic reading of llama-style fields)", verified=False)

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
}
