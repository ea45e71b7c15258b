"""``calc --from-transformers``: read the cache structure from transformers itself.

The seed asks to "prefer the engine's authoritative per-layer spec". With transformers (and
torch) installed, this module builds the model from its config on the ``meta`` device (no memory,
no weights), runs one forward of two tokens and reads what transformers' own cache holds, layer
by layer (``transformers/cache_utils.py``, 5.x):

* ``DynamicLayer`` K ``[batch, kv_heads, seq, head_dim]`` and V ``[batch, kv_heads, seq, v_dim]``:
  full attention (MLA models keep the latent ``[batch, 1, seq, kv_lora_rank]`` as K and the
  rotary key ``[batch, 1, seq, rope]`` as V);
* ``DynamicSlidingWindowLayer`` (``sliding_window``): sliding, or chunked when the config's
  ``layer_types`` says ``chunked_attention`` (the same class with the chunk size);
* a linear-attention layer (``conv_states`` / ``recurrent_states``): a recurrent state; with
  keys as well (``LinearAttentionAndFullAttentionLayer``, Falcon-H1's ``hybrid``) both;
* ``DummyLayer`` or a layer without keys: nothing stored (KV-shared or MLP-only layers);
* a sparse-attention indexer's key cache (``DynamicIndexedLayer.indexer_keys``, MiniMax-M3's
  ``idx_keys``): the layer's ``index_head_dim``.

Any other floating-point tensor a cache layer holds refuses the answer, naming it: the sum is of
every tensor transformers keeps, or there is no number.

The reading is authoritative for which layers exist, their kinds, KV heads, head sizes,
windows and state sizes. Where kvbudget's table also resolves the model, every layer is
compared and a disagreement is a ``not_applicable`` answer naming the layer (never a silent
pick). Where the table refuses, a model whose layers are all attention (or empty) is built from
transformers' reading alone, marked unverified for the other engines' layouts. The ledger's
``layer_structure`` line says which happened. Building a layer from a reading and comparing it
with the table's live in :mod:`kvbudget.spec.transformers_compare`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvbudget.errors import ConfigError, SpecError
from kvbudget.safety.limits import MAX_TRANSFORMERS_LAYERS
from kvbudget.spec.layers import (
    NoAttention,
)
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.provenance import LedgerEntry
from kvbudget.spec.resolve import ResolvedModel
from kvbudget.spec.transformers_compare import attention_spec, disagreement

INSTALL_HINT = (
    "from-transformers: needs transformers and torch; install them with "
    "pip install transformers torch, or drop --from-transformers to use kvbudget's own table"
)

#: tokens of the probe forward (enough to give every cached tensor its per-token shape)
PROBE_TOKENS = 2


def _modules() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ConfigError(INSTALL_HINT, field="from_transformers") from exc
    return torch, transformers


def _config_dict(resolved: ResolvedModel, overrides: dict[str, Any] | None) -> dict[str, Any]:
    if resolved.source is None:
        raise SpecError("from-transformers: no config.json was found to build", field="model")
    raw = dict(resolved.source.raw)
    if overrides:
        if isinstance(raw.get("text_config"), dict):
            raw["text_config"] = {**raw["text_config"], **overrides}
        else:
            raw.update(overrides)
    return raw


def _build(raw: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(config, text config, cache) after a meta-device forward of :data:`PROBE_TOKENS` tokens."""
    torch, transformers = _modules()
    model_type = raw.get("model_type")
    kwargs = {k: v for k, v in raw.items() if k not in ("model_type", "transformers_version")}
    try:
        config = transformers.AutoConfig.for_model(str(model_type), **kwargs)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        ids = torch.zeros((1, PROBE_TOKENS), dtype=torch.long, device="meta")
        with torch.no_grad():
            out = model.eval()(input_ids=ids, use_cache=True)
    except Exception as exc:
        words = " ".join(str(exc).split())[:300]
        raise SpecError(
            f"from-transformers: transformers {transformers.__version__} could not build "
            f"model_type {model_type!r} on the meta device ({type(exc).__name__}: {words}); "
            "drop --from-transformers to use kvbudget's table",
            field="model",
        ) from exc
    return config, config.get_text_config(decoder=True), out.past_key_values


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in tensor.shape)


def read_layers(cache: Any, text: Any) -> list[dict[str, Any]]:
    """One dict per decoder layer: what transformers' cache holds for it."""
    layers = getattr(cache, "layers", None)
    if not isinstance(layers, list):
        raise SpecError(
            f"from-transformers: the returned cache ({type(cache).__name__}) has no per-layer "
            "list to read; drop --from-transformers",
            field="model",
        )
    types = list(getattr(text, "layer_types", None) or [])
    # MiniMaxCache keeps lightning-attention states outside ``layers`` (``linear_cache``)
    linear = list(getattr(cache, "linear_cache", None) or [])
    out: list[dict[str, Any]] = []
    for index in range(max(len(layers), len(linear))):
        state = linear[index] if index < len(linear) else None
        if state is not None and hasattr(state, "shape"):
            out.append(
                {
                    "index": index,
                    "class": f"{type(cache).__name__}.linear_cache",
                    "kind": "state",
                    "conv_shapes": [],
                    "recurrent_shapes": [_shape(state)[1:]],
                }
            )
            continue
        layer: Any = layers[index] if index < len(layers) else None
        entry: dict[str, Any] = {"index": index, "class": type(layer).__name__}
        keys = getattr(layer, "keys", None)
        if keys is not None:
            window = getattr(layer, "sliding_window", None)
            chunked = index < len(types) and types[index] == "chunked_attention"
            entry.update(
                kind="full" if window is None else ("chunked" if chunked else "sliding"),
                num_kv_heads=_shape(keys)[1],
                head_dim=_shape(keys)[-1],
                v_head_dim=_shape(layer.values)[-1],
                window=int(window) if window is not None else None,
                kv_element_bytes=int(keys.element_size()),
            )
        _indexer_and_unknown(layer, entry)
        if hasattr(layer, "conv_states"):
            # floating conv states only: Qwen4-Exp's n-gram context (state 2) holds token ids
            conv = [
                t for t in layer.conv_states.values() if t is not None and t.is_floating_point()
            ]
            rec = [t for t in layer.recurrent_states.values() if t is not None]
            entry.update(
                # LinearAttentionAndFullAttentionLayer (Falcon-H1's "hybrid"): keys and states
                attention_kind=entry.get("kind"),
                kind="state" if keys is None else "hybrid",
                conv_shapes=[_shape(t)[1:] for t in conv],
                recurrent_shapes=[_shape(t)[1:] for t in rec],
            )
        elif keys is None:
            entry["kind"] = "none"
        out.append(entry)
    return out


#: per-layer cache tensors kvbudget reads; any other floating tensor a layer holds refuses
KNOWN_TENSORS = ("keys", "values", "conv_states", "recurrent_states")
#: a sparse-attention indexer's key cache: ``DynamicIndexedLayer.indexer_keys``
#: ``[batch, seq, index_head_dim]`` (DeepSeek-V3.2, GLM-5) and MiniMax-M3's
#: ``MiniMaxM3VLSparseCacheLayer.idx_keys`` ``[batch, 1, seq, index_head_dim]``
INDEXER_TENSORS = ("indexer_keys", "idx_keys")


def _indexer_and_unknown(layer: Any, entry: dict[str, Any]) -> None:
    """Record the indexer key size, and name any floating tensor kvbudget does not read."""
    torch, _ = _modules()
    for name, value in vars(layer).items() if hasattr(layer, "__dict__") else ():
        if name in KNOWN_TENSORS:
            continue
        if isinstance(value, dict | list | tuple):
            # tensors held in containers (DeepSeek-V4's compressor buffer_kv / buffer_gate /
            # compressed_kv dicts) are cache too: kvbudget does not read them, so it refuses
            items = value.values() if isinstance(value, dict) else value
            if any(
                isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0
                for t in items
            ):
                entry.setdefault("unknown", name)
            continue
        if not isinstance(value, torch.Tensor):
            continue
        if not value.is_floating_point() or value.numel() == 0:
            continue
        if name in INDEXER_TENSORS:
            shape = _shape(value)
            if len(shape) == 4 and shape[1] != 1:
                entry.setdefault("unknown", f"{name} with {shape[1]} heads")
            entry["index_head_dim"] = shape[-1]
            entry["index_element_bytes"] = int(value.element_size())
        else:
            entry.setdefault("unknown", name)


def _summary(entries: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for entry in entries:
        counts[f"{entry['kind']} ({entry['class']})"] = (
            counts.get(f"{entry['kind']} ({entry['class']})", 0) + 1
        )
    return ", ".join(f"{n} {name}" for name, n in counts.items())


def _with_entry(spec: ModelSpec, entry: LedgerEntry) -> ModelSpec:
    ledger = (*(e for e in spec.ledger if e.field != entry.field), entry)
    return replace(spec, ledger=ledger)


def from_transformers(
    resolved: ResolvedModel, *, overrides: dict[str, Any] | None = None
) -> ResolvedModel:
    """``resolved`` with its layer structure read from (and checked against) transformers."""
    if resolved.spec is not None and resolved.spec.num_layers > MAX_TRANSFORMERS_LAYERS:
        raise ConfigError(
            f"from_transformers: {resolved.spec.num_layers:,} layers is beyond "
            f"{MAX_TRANSFORMERS_LAYERS:,} for --from-transformers (transformers builds one module "
            "per layer; docs/limits.md); drop --from-transformers",
            field="from_transformers",
        )
    _, transformers = _modules()
    raw = _config_dict(resolved, overrides)
    _, text, cache = _build(raw)
    entries = read_layers(cache, text)
    where = (
        f"transformers {transformers.__version__}: AutoModelForCausalLM.from_config on the meta "
        f"device, one forward of {PROBE_TOKENS} tokens, {type(cache).__name__}.layers"
    )
    base = next((e for e in resolved.ledger if e.field == "architecture"), None)
    read = LedgerEntry(
        field="layer_structure",
        value=_summary(entries),
        source="derived",
        location=where,
        note="read from transformers itself (--from-transformers)",
    )
    resolved = replace(resolved, ledger=(*resolved.ledger, read))
    spec = resolved.spec
    unknown = next((e for e in entries if "unknown" in e), None)
    if unknown is not None:
        return _refuse(
            resolved,
            f"layer {unknown['index']}: transformers' cache ({unknown['class']}) also holds "
            f"{unknown['unknown']}, which kvbudget does not read, so a sum would be partial; "
            "drop --from-transformers for the table's answer",
        )
    if spec is not None:
        if len(spec.layers) != len(entries):
            return _refuse(
                resolved,
                f"transformers caches {len(entries)} layers, kvbudget's table reads "
                f"{len(spec.layers)}; report it (drop --from-transformers for the table's answer)",
            )
        for table_layer, entry in zip(spec.layers, entries, strict=True):
            why = disagreement(table_layer, entry)
            if why is not None:
                return _refuse(
                    resolved,
                    f"layer {entry['index']}: transformers and kvbudget's table disagree ({why}); "
                    "report it (drop --from-transformers for the table's answer)",
                )
        note = (
            "read from transformers itself (--from-transformers): every layer's kind, KV heads, "
            "head sizes, window and state size equal kvbudget's table"
        )
    else:
        unsupported = sorted({e["kind"] for e in entries} - {"full", "sliding", "chunked", "none"})
        if unsupported:
            return _refuse(
                resolved,
                f"{resolved.reason} (transformers caches {', '.join(unsupported)} layers, whose "
                "engine layouts kvbudget cannot derive from tensor shapes alone)",
            )
        layers = tuple(
            NoAttention(e["index"]) if e["kind"] == "none" else attention_spec(e) for e in entries
        )
        per_layer = _per_layer_fields(text, _GLOBAL_FIELDS)
        if per_layer:
            return _refuse(
                resolved,
                f"transformers' config gives {', '.join(per_layer)} per layer (a heterogeneous "
                "model: it refuses one global value), and kvbudget's model has one value for "
                "the whole model; no layout is derived",
            )
        spec = ModelSpec(
            model_id=resolved.model_id,
            architecture=str(base.value) if base is not None else str(raw.get("model_type")),
            model_type=str(getattr(text, "model_type", raw.get("model_type"))),
            layers=layers,
            hidden_size=getattr(text, "hidden_size", None),
            num_attention_heads=getattr(text, "num_attention_heads", None),
            vocab_size=getattr(text, "vocab_size", None),
            max_position_embeddings=getattr(text, "max_position_embeddings", None),
            torch_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "") or None,
            rules_verified=False,
            raw_config=raw,
            ledger=resolved.ledger,
        )
        note = (
            "read from transformers itself (--from-transformers); kvbudget's table has no rule "
            "to cross-check, so other engines' layouts are a structural reference"
        )
    spec = _with_entry(spec, replace(read, note=note))
    return replace(resolved, status="resolved", spec=spec, ledger=spec.ledger)


_GLOBAL_FIELDS = ("hidden_size", "num_attention_heads", "vocab_size", "max_position_embeddings")


def _per_layer_fields(text: Any, names: tuple[str, ...]) -> list[str]:
    """The fields a transformers config refuses to give one global value for: its heterogeneous
    configs (``transformers.integrations.heterogeneity``) raise on a per-layer attribute read as
    a global one, e.g. dots3_note_text's ``num_attention_heads`` (transformers 5.24)."""
    out = []
    for name in names:
        try:
            getattr(text, name, None)
        except Exception:  # transformers' own error class varies by version
            out.append(name)
    return out


def _refuse(resolved: ResolvedModel, reason: str) -> ResolvedModel:
    return replace(resolved, status="not_applicable", spec=None, reason=reason)
