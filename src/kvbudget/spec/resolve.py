"""Resolve a model reference into a :class:`ModelSpec` with a provenance ledger.

``resolve_model(ref)`` accepts a ``config.json`` path, a snapshot directory, a bundled catalog
id or a repo id in the local Hugging Face cache (see :mod:`kvbudget.spec.locate`). Multimodal
wrappers are read through their ``text_config``. Architecture rules live in
:mod:`kvbudget.spec.architectures`. A model whose architecture kvbudget does not model, or whose
config lacks a required field, resolves with ``status="not_applicable"`` and the exact list of
fields to supply (``--set key=value``); nothing is guessed silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from kvbudget.errors import ConfigError
from kvbudget.spec.arch_common import ARCH
from kvbudget.spec.arch_generic import build_from_traits
from kvbudget.spec.arch_read import UnknownVocabulary
from kvbudget.spec.arch_rows import WRAPPER_TEXT_TYPES
from kvbudget.spec.arch_table import ARCHITECTURES
from kvbudget.spec.catalog import find_catalog_entry
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.locate import ConfigSource, locate_config
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.normalise import normalise
from kvbudget.spec.provenance import LedgerEntry
from kvbudget.spec.traits import GENERIC, Traits
from kvbudget.spec.validate import check_config_fields

#: config keys that mean structure the generic reading cannot infer (model_type without a row)
_UNKNOWN_STRUCTURE_KEYS = (
    "kv_lora_rank",
    "mamba_d_state",
    "state_size",
    "ssm_state_size",
    "linear_num_value_heads",
    "linear_num_heads",
    "conv_L_cache",
    "num_kv_shared_layers",
    "per_layer_config",
    "kv_sharing_modes",
    "multi_query",
    "new_decoder_architecture",
    "num_kv_heads",
    "attn_config",
    "v_head_dim",
    "swa_num_key_value_heads",
    "swa_head_dim",
)

#: config keys that change what layers cache: one present (and not false/empty) that the rules
#: for this model_type never read makes the answer not_applicable, naming it, so that no number
#: rests on a field kvbudget did not read
STRUCTURAL_KEYS = (
    "layer_types",
    "layers_block_type",
    "hybrid_override_pattern",
    "per_layer_config",
    "num_kv_shared_layers",
    "global_head_dim",
    "num_global_key_value_heads",
    "kv_lora_rank",
    "index_head_dim",
    "index_n_heads",
    "indexer_types",
    "sparse_attention_config",
    "compress_ratios",
    "compress_ratio",
    "swa_num_key_value_heads",
    "swa_head_dim",
    "swa_v_head_dim",
    "hybrid_layer_ids",
    "hybrid_layer_pattern",
    "linear_attn_config",
    "mamba_num_heads",
    "ssm_state_size",
    "mamba_d_state",
    "linear_num_value_heads",
    "attn_config",
    "block_configs",
)

ResolveStatus = Literal["resolved", "not_applicable"]

#: defaults an architecture applies when a real checkpoint omits the key (transformers' config class)
#: values an architecture's transformers config class supplies when config.json omits the key
#: (recorded in the ledger as ``architecture_default``). Gemma configs tie the LM head to the
#: embeddings by default; every Llama-4 MoE layer has one shared expert of ``intermediate_size``.
_ARCH_FIELD_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"tie_word_embeddings": True},
    "gemma2": {"tie_word_embeddings": True},
    "gemma3_text": {
        "max_position_embeddings": 131072,
        "vocab_size": 262208,
        "tie_word_embeddings": True,
    },
    "gemma3n_text": {"tie_word_embeddings": True},
    "llama4_text": {"num_shared_experts": 1},
}


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """The outcome of resolving a model reference."""

    status: ResolveStatus
    spec: ModelSpec | None
    ledger: tuple[LedgerEntry, ...]
    missing: tuple[str, ...] = ()
    reason: str = ""
    model_id: str = ""
    source: ConfigSource | None = field(default=None, repr=False)


def parse_overrides(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["key=value", ...]`` -> dict; values are JSON when they parse (``8``, ``true``, ``null``)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"--set: {pair!r} is not key=value; write e.g. --set num_key_value_heads=8",
                field="set",
            )
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


def resolve_model(
    ref: str, *, overrides: dict[str, Any] | None = None, allow_download: bool = False
) -> ResolvedModel:
    """Find the config for ``ref`` and turn it into a spec (or a not-applicable verdict)."""
    source = locate_config(ref, allow_download=allow_download)
    return resolve_config(source, overrides=overrides)


def resolve_config(
    source: ConfigSource, *, overrides: dict[str, Any] | None = None
) -> ResolvedModel:
    raw = source.raw
    text = raw.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else raw
    prefix = "text_config." if cfg is not raw else ""
    location = source.model_id if source.origin == "catalog" else str(source.path)
    reader = FieldReader(
        cfg,
        prefix=prefix,
        location=f"catalog:{location}" if source.origin == "catalog" else location,
        config_source="catalog" if source.origin == "catalog" else "config",
        sha256=source.sha256,
        revision=source.revision,
        overrides=overrides,
    )
    top_type = raw.get("model_type")
    archs = raw.get("architectures") or []
    architecture = (
        str(archs[0]) if isinstance(archs, list) and archs else str(top_type or "unknown")
    )
    reader.record(
        "architecture",
        architecture,
        reader.config_source,
        location=f"{reader.location}:architectures[0]",
    )
    if source.origin == "catalog":
        entry = find_catalog_entry(source.model_id)
        if entry is not None:
            reader.record(
                "catalog_copy",
                entry.status,
                "catalog",
                location=f"catalog:{entry.path.name}",
                note=f"bundled copy of the model's config.json ({entry.note or 'see SOURCES.md'})",
            )
    if prefix:
        reader.record(
            "text_config",
            True,
            reader.config_source,
            note="multimodal wrapper: KV fields read from text_config",
        )
    default_type = WRAPPER_TEXT_TYPES.get(str(top_type)) if prefix else top_type
    model_type = reader.get("model_type", default=default_type, default_source=ARCH, required=False)
    normalised = normalise(str(model_type), cfg, prefix)
    reader.config = normalised.config
    check_config_fields({**normalised.config, **(overrides or {})}, prefix)
    if prefix and "tie_word_embeddings" in raw:
        check_config_fields({"tie_word_embeddings": raw["tie_word_embeddings"]})
    if normalised.notes:
        reader.record(
            "config_normalised",
            "; ".join(normalised.notes),
            "derived",
            note="transformers' config class applies these on load (kvbudget.spec.normalise)",
        )
    traits = ARCHITECTURES.get(str(model_type))
    builder = traits.builder if traits is not None else None
    verified = traits is not None and traits.verified
    try:
        if builder is not None:
            layers = builder(reader, str(model_type))
        else:
            generic_missing = _generic_gaps(reader) if traits is None else []
            if generic_missing:
                return _not_applicable(
                    source,
                    reader,
                    generic_missing,
                    f"model_type {model_type!r} ({architecture}) has no kvbudget rule and its config "
                    f"carries {', '.join(generic_missing)} whose meaning the generic reading cannot "
                    "infer; supply --set layer_types=[...] (full_attention, sliding_attention, "
                    "chunked_attention) or use the explicit mode (--layers/--kv-heads/--head-dim)",
                )
            layers = build_from_traits(reader, traits or GENERIC)
    except UnknownVocabulary as exc:
        return _not_applicable(source, reader, [exc.field], f"{model_type}: {exc.reason}")
    if reader.missing or layers is None:
        missing = reader.missing or ["layer structure"]
        fix = " ".join(f"--set {k}=..." for k in missing)
        return _not_applicable(
            source, reader, missing, f"config lacks {', '.join(missing)}; supply them with {fix}"
        )
    unread = [
        key
        for key in STRUCTURAL_KEYS
        if reader.config.get(key) not in (None, False, 0, "", [], {})
        and key not in reader.read_keys
        and key not in normalised.consumed
    ]
    if unread:
        return _not_applicable(
            source,
            reader,
            unread,
            f"{model_type}: config field {unread[0]}={str(reader.config[unread[0]])[:60]} changes "
            "what layers cache and kvbudget's rules for this model_type do not read it, so no "
            "exact number can be given; supply --set layer_types=[...] or use the explicit mode "
            "(--layers/--kv-heads/--head-dim)",
        )
    _record_rules(reader, str(model_type), builder is not None, traits, verified)
    if source.quant_raw is not None and source.quant_path is not None:
        where = (
            f"catalog:{source.quant_path.parent.name}/{source.quant_path.name}"
            if source.origin == "catalog"
            else str(source.quant_path)
        )
        reader.record(
            "quantization_config",
            "hf_quant_config.json",
            reader.config_source,
            location=where,
            note="config.json has no quantization_config: the checkpoint's hf_quant_config.json "
            "is read as it, as vLLM does (transformers_utils/config.py lines 889-900)",
        )
    spec = ModelSpec(
        model_id=source.model_id,
        architecture=architecture,
        model_type=str(model_type),
        layers=layers,
        rules_verified=verified,
        **_other_fields(reader, raw, str(model_type), source.quant_raw),
        raw_config=cfg,
        # the tower's config: under a text_config wrapper (Gemma-3, Llama-4) or beside the
        # text fields at the top (Qwen2.5-VL's older config.json)
        wrapper_config=raw if isinstance(raw.get("vision_config"), dict) else {},
    )
    unused = reader.unused_overrides()
    if unused:
        raise ConfigError(
            f"--set: {', '.join(unused)} is not read for model_type {model_type}; remove it or check the key name",
            field="set",
        )
    ledger = tuple(reader.entries.values())
    return ResolvedModel(
        "resolved", _with_ledger(spec, ledger), ledger, model_id=source.model_id, source=source
    )


def _with_ledger(spec: ModelSpec, ledger: tuple[LedgerEntry, ...]) -> ModelSpec:
    from dataclasses import replace

    return replace(spec, ledger=ledger)


def _not_applicable(
    source: ConfigSource, reader: FieldReader, missing: list[str], reason: str
) -> ResolvedModel:
    ledger = tuple(reader.entries.values())
    return ResolvedModel(
        "not_applicable", None, ledger, tuple(missing), reason, source.model_id, source
    )


def _first(reader: FieldReader, keys: tuple[str, ...], name: str) -> Any:
    for key in keys:
        if reader.has(key):
            return reader.get(key, name=name, required=False)
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _other_fields(
    reader: FieldReader, raw: dict[str, Any], model_type: str, hf_quant: dict[str, Any] | None
) -> dict[str, Any]:
    defaults = _ARCH_FIELD_DEFAULTS.get(model_type, {})

    def opt(key: str) -> Any:
        if key in defaults:
            return reader.get(key, default=defaults[key], default_source=ARCH, required=False)
        return reader.get(key, required=False)

    dtype = _first(reader, ("torch_dtype", "dtype"), "torch_dtype")
    if dtype is None and raw is not reader.config:
        dtype = raw.get("torch_dtype") or raw.get("dtype")
        if dtype is not None:
            reader.record(
                "torch_dtype",
                dtype,
                reader.config_source,
                location=f"{reader.location}:torch_dtype",
            )
    if dtype is None:
        reader.record(
            "torch_dtype",
            None,
            "default",
            note="config names no dtype; KV 'auto' means bfloat16 on vLLM/SGLang",
        )
    intermediate = opt("intermediate_size")
    quant = raw.get("quantization_config") or reader.config.get("quantization_config") or hf_quant
    return {
        "hidden_size": _int_or_none(opt("hidden_size")),
        "num_attention_heads": _int_or_none(reader.peek("num_attention_heads")),
        "vocab_size": _int_or_none(opt("vocab_size")),
        "intermediate_size": _int_or_none(
            intermediate if not isinstance(intermediate, list) else max(intermediate)
        ),
        "max_position_embeddings": _int_or_none(opt("max_position_embeddings")),
        "torch_dtype": str(dtype) if dtype is not None else None,
        "tie_word_embeddings": bool(
            raw["tie_word_embeddings"]
            if "tie_word_embeddings" not in reader.config and "tie_word_embeddings" in raw
            else opt("tie_word_embeddings") or False
        ),
        "num_experts": _int_or_none(
            _first(reader, ("num_experts", "num_local_experts", "n_routed_experts"), "num_experts")
        ),
        "num_experts_per_tok": _int_or_none(
            _first(reader, ("num_experts_per_tok", "moe_topk"), "num_experts_per_tok")
        ),
        "moe_intermediate_size": _int_or_none(
            _first(reader, ("moe_intermediate_size",), "moe_intermediate_size")
        ),
        "num_shared_experts": _int_or_none(
            _first(reader, ("n_shared_experts",), "num_shared_experts")
            if reader.has("n_shared_experts")
            else opt("num_shared_experts")
        ),
        "shared_expert_intermediate_size": _int_or_none(
            _first(reader, ("shared_expert_intermediate_size",), "shared_expert_intermediate_size")
        ),
        "quantization_config": quant if isinstance(quant, dict) else None,
        "quantization_file": "hf_quant_config.json"
        if isinstance(quant, dict) and quant is hf_quant
        else "config.json",
    }


def _generic_gaps(reader: FieldReader) -> list[str]:
    """Keys of an unknown model_type whose meaning the generic reading cannot infer."""
    gaps = [key for key in _UNKNOWN_STRUCTURE_KEYS if reader.peek(key) is not None]
    if not reader.has("layer_types") and (
        reader.peek("sliding_window") is not None or reader.peek("attention_chunk_size") is not None
    ):
        gaps.append("layer_types")
    return gaps


def _record_rules(
    reader: FieldReader, model_type: str, builder: bool, traits: Traits | None, verified: bool
) -> None:
    if builder:
        source, note = (
            "kvbudget.spec.architectures",
            "hand-written rule, checked against transformers"
            if verified
            else "hand-written rule from an engine's source (no transformers class to check)",
        )
    elif traits is not None:
        source, note = traits.source, "trait table row (kvbudget.spec.arch_table)"
    else:
        source, note = GENERIC.source, "no row for this model_type"
    note += (
        "; verified against transformers' cache (exact)"
        if verified
        else "; rules UNVERIFIED for this architecture: the result is a structural reference"
    )
    reader.record("architecture_rules", source, "architecture_default", note=note)
