"""transformers' config normalisation for the sparse and compressed attention families.

MiniMax-M3, GLM-MoE-DSA, HY-V4, DeepSeek-V4, dots3-note and Qwen4-Exp: the ``__post_init__``
rewrites :func:`kvbudget.spec.normalise.normalise` applies for these model types (each rule cites
its transformers source; the overview is :mod:`kvbudget.spec.normalise`'s docstring).
"""

from __future__ import annotations

from kvbudget.errors import SpecError
from kvbudget.spec.normalise_common import Normalised, expected

#: MiniMax-M3's indexer query-side fields: how many heads score and which key blocks win; the
#: cache keeps one key head of ``index_head_dim`` per token whatever they are
#: (transformers 5.24 ``modeling_minimax_m3_vl.py`` ``MiniMaxM3VLIndexer`` line 549: ``k_proj``
#: to ``index_head_dim``, one head; line 570: ``cache.layers[i].update_index``)
MINIMAX_M3_QUERY_FIELDS = (
    "index_n_heads",
    "index_block_size",
    "index_topk_blocks",
    "index_local_blocks",
)
#: ``configuration_deepseek_v4.py`` ``_COMPRESS_RATIO_TO_LAYER_TYPE`` / ``default_compress_rates``
DEEPSEEK_V4_RATIO_TYPES = {
    0: "sliding_attention",
    4: "compressed_sparse_attention",
    128: "heavily_compressed_attention",
}
DEEPSEEK_V4_RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
#: Dots3NoteTextConfig's ``swa_*`` defaults (configuration_dots3_note.py lines 321-333)
DOTS3_SWA_DEFAULTS = {
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 1024,
    "kv_lora_rank": 1024,
    "head_dim": 256,
    "qk_nope_head_dim": 192,
    "v_head_dim": 128,
}


def minimax_m3(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.update(MINIMAX_M3_QUERY_FIELDS)
    sparse = cfg.get("sparse_attention_config")
    if sparse is None:
        _minimax_m3_unindexed(out)
        return
    out.consumed.add("sparse_attention_config")
    if not isinstance(sparse, dict):
        raise expected(prefix, "sparse_attention_config", "a mapping", sparse)
    if "sparse_index_dim" in sparse:
        cfg["index_head_dim"] = sparse["sparse_index_dim"]
    freq = sparse.get("sparse_attention_freq")
    if cfg.get("layer_types") is None and freq is not None:
        if not isinstance(freq, list):
            raise expected(
                prefix, "sparse_attention_config.sparse_attention_freq", "a list of 0/1", freq
            )
        cfg["layer_types"] = ["minimax_m3_sparse" if f else "full_attention" for f in freq]
    out.notes.append(
        "sparse_attention_config flattened: sparse_index_dim -> index_head_dim, "
        "sparse_attention_freq -> layer_types (minimax_m3_sparse where 1; MiniMaxM3VLTextConfig)"
    )
    _minimax_m3_unindexed(out)


def _minimax_m3_unindexed(out: Normalised) -> None:
    """No ``minimax_m3_sparse`` layer (transformers' default ``MiniMaxM3VLTextConfig``: all
    ``full_attention``): ``index_head_dim`` sizes nothing any layer caches
    (``modeling_minimax_m3_vl.py``: only sparse layers get ``MiniMaxM3VLSparseCacheLayer``)."""
    types = out.config.get("layer_types")
    if isinstance(types, list) and "minimax_m3_sparse" not in types:
        out.consumed.add("index_head_dim")


def glm_moe_dsa(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.update(("index_topk_pattern", "index_topk_freq", "index_skip_topk_offset"))
    if cfg.get("indexer_types") is not None:
        return
    n = cfg.get("num_hidden_layers")
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        return
    pattern = cfg.get("index_topk_pattern")
    if isinstance(pattern, str):
        if any(c not in "FS" for c in pattern):
            raise expected(prefix, "index_topk_pattern", "F and S only", pattern)
        types = [{"F": "full", "S": "shared"}[c] for c in pattern]
    elif pattern is not None:
        types = list(pattern)
    else:
        freq = cfg.get("index_topk_freq", 1)
        offset = cfg.get("index_skip_topk_offset", 2)
        for key, value in (("index_topk_freq", freq), ("index_skip_topk_offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise expected(prefix, key, "an integer", value)
        freq = max(freq, 1)
        types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    cfg["indexer_types"] = types
    out.notes.append("indexer_types derived as GlmMoeDsaConfig does (index_topk_freq/offset)")


def hy_v4(out: Normalised, prefix: str) -> None:
    cfg = out.config
    if cfg.get("indexer_types") is not None:
        return
    n = cfg.get("num_hidden_layers", 34)
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        return
    cfg["indexer_types"] = ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(n)]
    out.notes.append(
        "indexer_types derived as HYV4Config does (full on layer 0 and every 4th from 1); vLLM "
        "0.32 reads indexer_types when the config has it, else its own index_topk_freq rule "
        "(models/hy_v4/nvidia/attention.py lines 82-110)"
    )


def deepseek_v4(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.update(("compress_ratios", "compress_rate_csa", "compress_rate_hca"))
    rates = cfg.get("compress_rates")
    if rates is not None and not isinstance(rates, dict):
        raise expected(prefix, "compress_rates", "a mapping of layer type to rate", rates)
    merged = dict(DEEPSEEK_V4_RATES if rates is None else rates)
    for legacy, kind in (
        ("compress_rate_csa", "compressed_sparse_attention"),
        ("compress_rate_hca", "heavily_compressed_attention"),
    ):
        if cfg.get(legacy) is not None:
            merged[kind] = cfg[legacy]
    if merged != rates:
        cfg["compress_rates"] = merged
        out.notes.append(
            f"compress_rates = {merged} (DeepseekV4Config: CSA 4 / HCA 128 by default, legacy "
            "compress_rate_csa / compress_rate_hca folded in)"
        )
    n = cfg.get("num_hidden_layers", 43)
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        return  # the reader reports num_hidden_layers
    ratios = cfg.get("compress_ratios")
    if cfg.get("layer_types") is None and ratios is not None:
        if not isinstance(ratios, list) or any(
            isinstance(x, bool) or x not in DEEPSEEK_V4_RATIO_TYPES for x in ratios
        ):
            raise SpecError(
                f"{prefix}compress_ratios: expected a list of 0, 4 or 128 (DeepseekV4Config maps "
                f"only these to layer types), got {str(ratios)[:60]!r}; fix the config",
                field="compress_ratios",
            )
        cfg["layer_types"] = [DEEPSEEK_V4_RATIO_TYPES[x] for x in ratios]
        out.notes.append(
            "layer_types from compress_ratios (0 sliding_attention, 4 compressed_sparse_attention, "
            "128 heavily_compressed_attention), as DeepseekV4Config does"
        )
    if cfg.get("layer_types") is None:
        cfg["layer_types"] = ["heavily_compressed_attention"] * min(n, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
            for i in range(max(n - 2, 0))
        ]
        out.notes.append(
            "layer_types: DeepseekV4Config's default (2 heavily_compressed_attention, then "
            "heavily_compressed / compressed_sparse alternating)"
        )
    types = cfg["layer_types"]
    if isinstance(types, list) and len(types) > n:
        cfg["layer_types"] = types[:n]
        out.notes.append(
            f"layer_types cut to num_hidden_layers ({n} of {len(types)} entries; the extra ones "
            "belong to MTP layers DeepseekV4Config does not build)"
        )
    kv = cfg.get("num_key_value_heads")
    if kv is not None and kv != 1:
        cfg["num_key_value_heads"] = 1
        out.notes.append(
            f"num_key_value_heads: the config says {str(kv)[:20]} but DeepseekV4Attention caches "
            "one shared K=V head whatever it says (modeling_deepseek_v4.py lines 789 and 800): 1"
        )


def dots3_note(out: Normalised, prefix: str) -> None:
    """Dots3NoteTextConfig.__post_init__ (configuration_dots3_note.py lines 286-338): the window
    from ``sliding_window_size`` (512), ``layer_types`` (indexed, or full without DSA, on layers
    0, 1 and i % 4 == 1, sliding elsewhere unless ``use_sliding_window`` is false), the legacy
    ``full_attention`` name for DSA layers, and the sliding layers' ``per_layer_config`` from the
    checkpoint's ``swa_*`` keys."""
    cfg = out.config
    swa_keys = [f"swa_{name}" for name in (*DOTS3_SWA_DEFAULTS, "qk_rope_head_dim")]
    out.consumed.update(("use_dsa", "use_sliding_window", "sliding_window_size", *swa_keys))
    has_per_layer = "per_layer_config" in cfg
    use_dsa = cfg.get("use_dsa", None if has_per_layer else True)
    use_sliding = cfg.get("use_sliding_window", True)
    if cfg.get("sliding_window") is None:
        cfg["sliding_window"] = cfg.get("sliding_window_size", 512)
    n = cfg.get("num_hidden_layers", 46)
    types = cfg.get("layer_types")
    if types is None and isinstance(n, int) and not isinstance(n, bool) and n > 0:
        full = "full_attention" if use_dsa is False else "indexed_attention"
        types = [
            full if not use_sliding or i < 2 or i % 4 == 1 else "sliding_attention"
            for i in range(n)
        ]
        out.notes.append(
            f"layer_types derived as Dots3NoteTextConfig does ({full} on layers 0, 1 and "
            "i % 4 == 1, sliding_attention elsewhere)"
        )
    if isinstance(types, list) and use_dsa is not None:
        old, new = ("full_attention", "indexed_attention")
        if not use_dsa:
            old, new = new, old
        if old in types:
            out.notes.append(f"layer_types: {old} -> {new} (use_dsa={use_dsa!r})")
        types = [new if t == old else t for t in types]
    if types is not None:
        cfg["layer_types"] = types
    if isinstance(types, list) and "indexed_attention" not in types:
        out.consumed.update(("index_head_dim", "index_n_heads"))  # no DSA layer: no indexer
    if not has_per_layer and isinstance(types, list):
        sliding = {name: cfg.get(f"swa_{name}", d) for name, d in DOTS3_SWA_DEFAULTS.items()}
        sliding["qk_rope_head_dim"] = cfg.get(
            "swa_qk_rope_head_dim", sliding["head_dim"] - sliding["qk_nope_head_dim"]
        )
        cfg["per_layer_config"] = {
            str(i): dict(sliding) for i, t in enumerate(types) if t == "sliding_attention"
        }
        if cfg["per_layer_config"]:
            out.notes.append(
                "per_layer_config of the sliding layers from swa_* (Dots3NoteTextConfig defaults "
                "where absent)"
            )


def qwen4_exp(out: Normalised, prefix: str) -> None:
    """Qwen4ExpTextConfig.__post_init__ (configuration_qwen4_exp.py lines 172-182):
    ``layer_types`` indexed_attention on every ``full_attention_interval``-th layer (4), linear
    elsewhere; a checkpoint's ``full_attention`` layers are indexed_attention."""
    cfg = out.config
    out.consumed.add("full_attention_interval")
    types = cfg.get("layer_types")
    n = cfg.get("num_hidden_layers", 40)
    if types is None and isinstance(n, int) and not isinstance(n, bool) and n > 0:
        every = cfg.get("full_attention_interval", 4)
        if isinstance(every, bool) or not isinstance(every, int) or every <= 0:
            raise expected(prefix, "full_attention_interval", "a positive integer", every)
        cfg["layer_types"] = [
            "linear_attention" if (i + 1) % every else "indexed_attention" for i in range(n)
        ]
        out.notes.append(
            f"layer_types derived as Qwen4ExpTextConfig does (indexed_attention every {every}th "
            "layer, linear_attention elsewhere)"
        )
    elif isinstance(types, list) and "full_attention" in types:
        cfg["layer_types"] = ["indexed_attention" if t == "full_attention" else t for t in types]
        out.notes.append("layer_types: full_attention -> indexed_attention (Qwen4-Exp's QSA)")
