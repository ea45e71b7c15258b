"""Declarative architecture traits: which config field says what, as transformers defines it.

One :class:`Traits` row per ``model_type`` (the one table, :data:`kvbudget.spec.arch_table.ARCHITECTURES`): the transformers file
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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvbudget.spec.fields import FieldReader
    from kvbudget.spec.layers import LayerSpec

#: a hand-written layer reader: the layers, or None when a required field is missing (the
#: reader lists it)
Builder = Callable[["FieldReader", str], "Sequence[LayerSpec] | None"]

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
    """What one state layer stores: the :class:`~kvbudget.spec.state_layers.StateLayer` fields.

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
    #: a hand-written reader for a structure no field above describes (Llama-4's chunked
    #: layers, Jamba, Mamba, Qwen3-Next, MiniMax, Gemma-3n, Nemotron-NAS) or whose edge rules
    #: the row's pattern does not carry (the dense and MLA builders); None: the generic reader
    builder: Builder | None = None
    verified: bool = True
    note: str = ""


#: the model types of MiniMax-M3's text decoder: the published config, vLLM 0.32's own
#: ``MiniMaxM3TextConfig`` and transformers' ``MiniMaxM3VLTextConfig``
MINIMAX_M3_TYPES = frozenset({"minimax_m3", "minimax_m3_text", "minimax_m3_vl_text"})

#: traits for a model_type kvbudget has no row for: llama-style field names, layer_types as given
GENERIC = Traits("(none: generic reading of llama-style fields)", verified=False)
