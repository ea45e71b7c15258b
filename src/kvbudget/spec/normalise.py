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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbudget.errors import SpecError

#: transformers ``configuration_utils._LEGACY_LAYER_TYPE_REMAP`` (5.x)
LEGACY_LAYER_TYPES = {
    "mamba": "linear_attention",
    "attention": "full_attention",
    "deepseek_sparse_attention": "indexed_attention",
    "qwen_sparse_attention": "indexed_attention",
}
#: ``NemotronHConfig._pattern_to_list``
NEMOTRON_H_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


@dataclass
class Normalised:
    """The config as transformers' config class sees it, with what was rewritten and why."""

    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    consumed: set[str] = field(default_factory=set)


def _expected(prefix: str, field: str, what: str, value: object) -> SpecError:
    """The one-line refusal of a config field whose value has the wrong shape."""
    return SpecError(
        f"{prefix}{field}: expected {what}, got {str(value)[:40]!r}; fix the config",
        field=field.split(".")[0],
    )


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


def _nemotron_h(out: Normalised, prefix: str) -> None:
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
        raise _expected(prefix, "hybrid_override_pattern", "a string of M, E, * and -", pattern)
    cfg["layers_block_type"] = [NEMOTRON_H_PATTERN[c] for c in pattern]
    cfg.pop("num_hidden_layers", None)
    out.notes.append(
        f"hybrid_override_pattern ({len(pattern)} layers) -> layers_block_type: M Mamba-2, "
        "E MoE, * attention, - MLP (NemotronHConfig._pattern_to_list); num_hidden_layers is its length"
    )


def _gemma4(out: Normalised, prefix: str) -> None:
    types = out.config.get("layer_types")
    if isinstance(types, list) and types and types[-1] != "full_attention":
        out.config["layer_types"] = [*types[:-1], "full_attention"]
        out.notes.append("layer_types: the last layer forced to full_attention (Gemma4TextConfig)")


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


def _minimax_m3(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.update(MINIMAX_M3_QUERY_FIELDS)
    sparse = cfg.get("sparse_attention_config")
    if sparse is None:
        _minimax_m3_unindexed(out)
        return
    out.consumed.add("sparse_attention_config")
    if not isinstance(sparse, dict):
        raise _expected(prefix, "sparse_attention_config", "a mapping", sparse)
    if "sparse_index_dim" in sparse:
        cfg["index_head_dim"] = sparse["sparse_index_dim"]
    freq = sparse.get("sparse_attention_freq")
    if cfg.get("layer_types") is None and freq is not None:
        if not isinstance(freq, list):
            raise _expected(
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


def _glm_moe_dsa(out: Normalised, prefix: str) -> None:
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
            raise _expected(prefix, "index_topk_pattern", "F and S only", pattern)
        types = [{"F": "full", "S": "shared"}[c] for c in pattern]
    elif pattern is not None:
        types = list(pattern)
    else:
        freq = cfg.get("index_topk_freq", 1)
        offset = cfg.get("index_skip_topk_offset", 2)
        for key, value in (("index_topk_freq", freq), ("index_skip_topk_offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise _expected(prefix, key, "an integer", value)
        freq = max(freq, 1)
        types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    cfg["indexer_types"] = types
    out.notes.append("indexer_types derived as GlmMoeDsaConfig does (index_topk_freq/offset)")


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


def _zamba2(out: Normalised, prefix: str) -> None:
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


def _hy_v4(out: Normalised, prefix: str) -> None:
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


def _mimo_v2_flash(out: Normalised, prefix: str) -> None:
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


def _kimi_linear(out: Normalised, prefix: str) -> None:
    cfg = out.config
    linear = cfg.get("linear_attn_config")
    if linear is None:
        return
    out.consumed.add("linear_attn_config")
    if not isinstance(linear, dict):
        raise _expected(prefix, "linear_attn_config", "a mapping", linear)
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


#: ``configuration_deepseek_v4.py`` ``_COMPRESS_RATIO_TO_LAYER_TYPE`` / ``default_compress_rates``
DEEPSEEK_V4_RATIO_TYPES = {
    0: "sliding_attention",
    4: "compressed_sparse_attention",
    128: "heavily_compressed_attention",
}
DEEPSEEK_V4_RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}


def _deepseek_v4(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.update(("compress_ratios", "compress_rate_csa", "compress_rate_hca"))
    rates = cfg.get("compress_rates")
    if rates is not None and not isinstance(rates, dict):
        raise _expected(prefix, "compress_rates", "a mapping of layer type to rate", rates)
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


def _dbrx(out: Normalised, prefix: str) -> None:
    cfg = out.config
    attn = cfg.get("attn_config")
    if attn is not None and not isinstance(attn, dict):
        raise _expected(prefix, "attn_config", "a mapping", attn)
    out.consumed.add("attn_config")
    kv = (attn or {}).get("kv_n_heads", 1)
    if cfg.get("num_key_value_heads", kv) != kv or "num_key_value_heads" not in cfg:
        out.notes.append(
            f"num_key_value_heads = attn_config.kv_n_heads = {kv}"
            + ("" if attn and "kv_n_heads" in attn else " (DbrxAttentionConfig's default)")
            + " (DbrxConfig.__post_init__ sets it whatever the config says)"
        )
    cfg["num_key_value_heads"] = kv


def _inkling_model(out: Normalised, prefix: str) -> None:
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
    _inkling(out, prefix)


def _inkling(out: Normalised, prefix: str) -> None:
    cfg = out.config
    out.consumed.add("local_layer_ids")
    n = cfg.get("num_hidden_layers", 66)
    if cfg.get("layer_types") is None and isinstance(n, int) and not isinstance(n, bool) and n > 0:
        local = cfg.get("local_layer_ids")
        if local is not None and not isinstance(local, list):
            raise _expected(prefix, "local_layer_ids", "a list of layer indices", local)
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


def _dots3_note(out: Normalised, prefix: str) -> None:
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


def _qwen4_exp(out: Normalised, prefix: str) -> None:
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
            raise _expected(prefix, "full_attention_interval", "a positive integer", every)
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


_RULES = {
    "dots3_note": _dots3_note,
    "dots3_note_text": _dots3_note,
    "qwen4_exp_text": _qwen4_exp,
    "dbrx": _dbrx,
    "inkling_text": _inkling,
    "inkling_model": _inkling_model,
    "deepseek_v4": _deepseek_v4,
    "deepseek_ref": _deepseek_v4,
    "kimi_linear": _kimi_linear,
    "nemotron_h": _nemotron_h,
    "gemma4_text": _gemma4,
    "gemma4_unified_text": _gemma4,
    "minimax_m3": _minimax_m3,
    "minimax_m3_text": _minimax_m3,
    "minimax_m3_vl_text": _minimax_m3,
    "glm_moe_dsa": _glm_moe_dsa,
    "mimo_v2_flash": _mimo_v2_flash,
    "hy_v4": _hy_v4,
    "zamba2": _zamba2,
}
