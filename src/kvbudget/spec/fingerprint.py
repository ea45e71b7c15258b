"""Cache compatibility identity: when may KV computed by one deployment be reused by another?

The second seed (§ shared caches): "a shared cache must draw the compatibility boundary of the
computation identity and the storage format: weights revision, tokenizer, chat template,
position encoding, adapter, multimodal inputs, KV dtype, layout and sharding rules; the same
model *name* does not prove compatibility; whether different TP configurations can share
depends on whether the back end converts shards." And: "vLLM and SGLang do not read each
other's KV by default, even with the same weights; the external connector's version matters."

Invariants:

* A :class:`CacheIdentity` is the full list of what changes either the *values* of the K/V
  tensors (weights, tokenizer, position encoding, adapter, multimodal hashing) or their *bytes
  on the wire* (KV dtype, engine layout, sharding, connector). Two identities are compatible
  only when every field that matters agrees; :func:`compatible` says which fields differ, each
  with both values.
* ``None`` means "not known". An unknown field never proves compatibility: a field unknown on
  either side is a reason (``unknown``), so ``compatible`` is ``False`` unless the caller asks
  to accept unknowns (``allow_unknown=True``), which the reason list still records.
* The chat template changes the *text* a conversation becomes, so the token ids an application
  sends; KV keyed by token ids stays valid for identical ids, but an application-level saved
  prefix (the seed's "application's saved context") does not. It is therefore a field of its
  own, judged like the others.
* Resharding: a different TP/PP split is compatible only when the connector declares that it
  converts shards (``connector_reshards``); otherwise it is a reason.

The digest (:meth:`CacheIdentity.digest`) is a sha256 over the canonical JSON of the fields, so
two processes computing an identity for the same deployment agree byte for byte.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from kvbudget.errors import SpecError
from kvbudget.spec.validate import check_rope_fields

#: fields whose disagreement means the K/V *values* differ
VALUE_FIELDS = (
    "weights_revision",
    "tokenizer_hash",
    "chat_template_hash",
    "position_encoding",
    "adapter",
    "multimodal_hash",
)
#: fields whose disagreement means the stored *bytes* cannot be read as they are
FORMAT_FIELDS = ("kv_cache_dtype", "engine", "layout", "connector")
SHARDING_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size")


@dataclass(frozen=True, slots=True)
class CacheIdentity:
    """Everything that decides whether a stored KV block may be reused by a deployment."""

    weights_revision: str | None
    tokenizer_hash: str | None
    chat_template_hash: str | None
    position_encoding: str | None
    adapter: str | None
    multimodal_hash: str | None
    kv_cache_dtype: str | None
    #: engine name and version, e.g. "vllm 0.32.0" (vLLM and SGLang never read each other's KV)
    engine: str | None
    #: block size and hash algorithm, e.g. "block_size=16 hash=sha256"
    layout: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    #: KV connector and its version, e.g. "LMCacheConnectorV1 0.3.9"; "none" when there is none
    connector: str | None
    connector_reshards: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def digest(self) -> str:
        text = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "identity") -> CacheIdentity:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names - {"digest", "schema"})
        if unknown:
            raise SpecError(
                f"{source}: unknown field {unknown[0]!r}; an identity has {', '.join(sorted(names))}",
                field=unknown[0],
            )
        missing = sorted(n for n in names if n not in data and n != "connector_reshards")
        if missing:
            raise SpecError(
                f"{source}: field {missing[0]!r} is missing; write it (null when unknown)",
                field=missing[0],
            )
        for name in SHARDING_FIELDS:
            value = data[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(
                    f"{source}: {name}={value!r} is not a positive integer; write 1 or more",
                    field=name,
                )
        for name in names - set(SHARDING_FIELDS) - {"connector_reshards"}:
            value = data[name]
            if value is not None and not isinstance(value, str):
                raise SpecError(
                    f"{source}: {name}={value!r} is not a string or null; quote it",
                    field=name,
                )
        kwargs = {n: data[n] for n in names if n in data}
        kwargs["connector_reshards"] = bool(data.get("connector_reshards", False))
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class Difference:
    """One field that stops reuse (or is unknown), with both values."""

    field: str
    left: Any
    right: Any
    kind: str  # "value" | "format" | "sharding" | "unknown"

    def describe(self) -> str:
        if self.kind == "unknown":
            return f"{self.field}: unknown ({self.left!r} vs {self.right!r}); cannot prove reuse is safe"
        what = {
            "value": "the K/V values differ",
            "format": "the stored bytes cannot be read as they are",
            "sharding": "the shards differ and the connector does not convert them",
        }[self.kind]
        return f"{self.field}: {self.left!r} vs {self.right!r} ({what})"


@dataclass(frozen=True, slots=True)
class Compatibility:
    compatible: bool
    differences: tuple[Difference, ...]

    @property
    def reasons(self) -> list[str]:
        return [d.describe() for d in self.differences]


def compatible(a: CacheIdentity, b: CacheIdentity, *, allow_unknown: bool = False) -> Compatibility:
    """May KV written by deployment ``a`` be reused by deployment ``b`` (and vice versa)?"""
    diffs: list[Difference] = []
    for name in VALUE_FIELDS + FORMAT_FIELDS:
        left, right = getattr(a, name), getattr(b, name)
        if left is None or right is None:
            diffs.append(Difference(name, left, right, "unknown"))
        elif left != right:
            diffs.append(
                Difference(name, left, right, "value" if name in VALUE_FIELDS else "format")
            )
    reshard = a.connector_reshards and b.connector_reshards
    for name in SHARDING_FIELDS:
        left, right = getattr(a, name), getattr(b, name)
        if left != right and not reshard:
            diffs.append(Difference(name, left, right, "sharding"))
    blocking = [d for d in diffs if d.kind != "unknown" or not allow_unknown]
    return Compatibility(not blocking, tuple(diffs))


# --------------------------------------------------------------------------- from files
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "tiktoken.model",
    "special_tokens_map.json",
    "added_tokens.json",
)
_ROPE_KEYS = (
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rope_type",
    "partial_rotary_factor",
    "rotary_dim",
    "rotary_pct",
    "max_position_embeddings",
    "position_embedding_type",
    "no_rope_layers",
    "use_rope",
)


def _sha256_files(paths: list[Path]) -> str | None:
    if not paths:
        return None
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def tokenizer_hash(directory: Path) -> str | None:
    """sha256 over the tokenizer's vocabulary files (``None`` when the folder has none)."""
    return _sha256_files([directory / n for n in _TOKENIZER_FILES if (directory / n).is_file()])


def chat_template_hash(directory: Path) -> str | None:
    """sha256 of the chat template: ``chat_template.jinja`` or ``tokenizer_config.json``'s."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return hashlib.sha256(jinja.read_bytes()).hexdigest()
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise SpecError(
            f"tokenizer: {config} is not valid JSON; fix or remove it", field="tokenizer"
        ) from None
    template = data.get("chat_template") if isinstance(data, dict) else None
    if template is None:
        return None
    text = json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def position_encoding(config: dict[str, Any]) -> str:
    """The position-encoding fields of a config (the text config for multimodal wrappers)."""
    text = config.get("text_config")
    cfg = text if isinstance(text, dict) else config
    check_rope_fields(cfg, "text_config." if cfg is not config else "")
    picked = {k: cfg[k] for k in _ROPE_KEYS if k in cfg}
    if not picked:
        return "none declared"
    return json.dumps(picked, sort_keys=True, separators=(",", ":"))


def weights_revision(config_sha256: str, revision: str | None, directory: Path | None) -> str:
    """The snapshot revision when known, else a digest of config.json and the weights index."""
    if revision:
        return f"revision:{revision}"
    h = hashlib.sha256(config_sha256.encode())
    if directory is not None:
        for name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            index = directory / name
            if index.is_file():
                h.update(index.read_bytes())
    return f"config+index:{h.hexdigest()[:32]}"
