"""``ModelSpec``: the resolved structure of a model, by runs of layers, with its provenance."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbudget.spec.layer_kinds import HEAD_KINDS
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import LayerSpec, cache_parts
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

    ``layers`` has one entry per decoder layer in order (``layer_index`` 0..N-1), held as a
    run-length :class:`~kvbudget.spec.layer_runs.LayerSeq` (a tuple given is compressed), so
    a config of 10^8 layers costs a few objects; :meth:`layer_runs` walks it per run. MoE fields
    are ``None`` for dense models. ``raw_config`` is the (text) config dict the spec was read
    from; ``ledger`` records where every field came from.
    """

    model_id: str
    architecture: str
    model_type: str
    layers: Sequence[LayerSpec]
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
    #: the file ``quantization_config`` was read from: ``config.json`` or a ModelOpt
    #: checkpoint's ``hf_quant_config.json`` (read when config.json has none)
    quantization_file: str = field(default="config.json", compare=False)
    rules_verified: bool = True  # False: layer rules read generically, unverified for this type
    raw_config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: a multimodal model's top-level config when it has a ``vision_config``; else empty
    wrapper_config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    ledger: tuple[LedgerEntry, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.layers, LayerSeq):
            object.__setattr__(self, "layers", LayerSeq.from_items(self.layers))

    @property
    def layer_seq(self) -> LayerSeq:
        layers = self.layers
        assert isinstance(layers, LayerSeq)  # __post_init__ made it one
        return layers

    def layer_runs(self) -> Iterator[tuple[LayerSpec, range]]:
        """``(layer, indices)`` per run: ``layer`` is the run's first layer, all alike."""
        return self.layer_seq.runs()

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
        counts: dict[str, int] = {}
        for layer, indices in self.layer_runs():
            counts[layer.kind] = counts.get(layer.kind, 0) + len(indices)
        return counts

    def kinds(self) -> tuple[str, ...]:
        return tuple(self.kind_counts())

    def num_kv_heads(self) -> int | None:
        """KV heads of the head-based attention layers (None if they differ or there are none)."""
        heads = {
            getattr(layer, "num_kv_heads", 0)
            for run, _ in self.layer_runs()
            for layer in cache_parts((run,))
            if layer.kind in HEAD_KINDS
        }
        return heads.pop() if len(heads) == 1 else None

    def ledger_entry(self, name: str) -> LedgerEntry | None:
        for entry in self.ledger:
            if entry.field == name:
                return entry
        return None
