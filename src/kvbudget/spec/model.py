"""``ModelSpec``: the resolved structure of a model, layer by layer, with its provenance."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kvbudget.spec.layers import HEAD_KINDS, LayerSpec, cache_parts
from kvbudget.spec.provenance import LedgerEntry

#: bytes per element of the torch dtypes a config may name
TORCH_DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model's structure as kvbudget understands it.

    ``layers`` has one entry per decoder layer in order (``layer_index`` 0..N-1). MoE fields
    are ``None`` for dense models. ``raw_config`` is the (text) config dict the spec was read
    from; ``ledger`` records where every field came from.
    """

    model_id: str
    architecture: str
    model_type: str
    layers: tuple[LayerSpec, ...]
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    vocab_size: int | None = None
    intermediate_size: int | None = None
    max_position_embeddings: int | None = None
    torch_dtype: str | None = None
    tie_word_embeddings: bool = False
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    num_shared_experts: int | None = None
    shared_expert_intermediate_size: int | None = None
    quantization_config: dict[str, Any] | None = field(default=None, compare=False)
    rules_verified: bool = True  # False: layer rules read generically, unverified for this type
    raw_config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    ledger: tuple[LedgerEntry, ...] = field(default=(), compare=False, repr=False)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def dtype_bytes(self) -> int | None:
        """Bytes per element of ``torch_dtype`` (None when unknown)."""
        if self.torch_dtype is None:
            return None
        return TORCH_DTYPE_BYTES.get(self.torch_dtype.removeprefix("torch."))

    def kind_counts(self) -> dict[str, int]:
        """Number of layers of each kind, in first-seen order."""
        return dict(Counter(layer.kind for layer in self.layers))

    def kinds(self) -> tuple[str, ...]:
        return tuple(self.kind_counts())

    def num_kv_heads(self) -> int | None:
        """KV heads of the head-based attention layers (None if they differ or there are none)."""
        heads = {
            getattr(layer, "num_kv_heads", 0)
            for layer in cache_parts(self.layers)
            if layer.kind in HEAD_KINDS
        }
        return heads.pop() if len(heads) == 1 else None

    def ledger_entry(self, name: str) -> LedgerEntry | None:
        for entry in self.ledger:
            if entry.field == name:
                return entry
        return None
