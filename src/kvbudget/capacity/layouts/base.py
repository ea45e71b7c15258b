"""Result types shared by the engine layouts.

A layout turns a :class:`~kvbudget.spec.model.ModelSpec` plus a load (``tokens`` per sequence,
``seqs`` sequences per replica) and a parallel plan (``tp``, ``pp``, ``dp``) into bytes per
pipeline stage on one rank. Tensor-parallel ranks of one stage hold the same bytes (KV heads are
split or replicated evenly), so a stage is described once and multiplied by ``tp``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from kvbudget.errors import ConfigError, KvbudgetError
from kvbudget.spec.layer_kinds import COMPRESSED_KINDS, has_indexer, has_sliding_latent

if TYPE_CHECKING:
    from kvbudget.spec.model import ModelSpec

#: a KV layout ``calc`` applies: transformers' own cache (``hf``) or one engine's (its name); the
#: names are the engines registered in ``capacity/engines/`` (``registry.layout_names``), parsed
#: where they enter by ``registry.parse_layout``; a layout is not an engine (``hf`` serves nothing)
Layout: TypeAlias = str


@dataclass(frozen=True, slots=True)
class GroupBytes:
    """Layers of one kind (and window) on one rank of one stage."""

    kind: str
    layer_indices: Sequence[int]  # a LayerIndices (ranges) from the layouts
    tokens_kept: int  # per sequence (cells / slots for paged engines); 0 for state layers
    bytes_per_token: int  # growth per cached token per sequence, all layers of the group, one rank
    bytes_per_sequence: int  # all layers of the group, one rank, one sequence
    bytes_total: int  # all layers of the group, one rank, all sequences
    note: str = ""

    @property
    def num_layers(self) -> int:
        return len(self.layer_indices)


@dataclass(frozen=True, slots=True)
class StageBytes:
    """One pipeline stage: the bytes one of its TP ranks holds."""

    pp_rank: int
    layer_start: int
    layer_end: int
    groups: tuple[GroupBytes, ...]

    @property
    def bytes_per_rank(self) -> int:
        return sum(g.bytes_total for g in self.groups)

    @property
    def bytes_per_sequence_per_rank(self) -> int:
        return sum(g.bytes_per_sequence for g in self.groups)

    @property
    def bytes_per_token_per_rank(self) -> int:
        return sum(g.bytes_per_token for g in self.groups)


@dataclass(frozen=True, slots=True)
class LayoutResult:
    """KV bytes of one deployment under one engine's layout."""

    engine: Layout
    kv_dtype: str
    tokens: int
    seqs: int
    tp: int
    pp: int
    dp: int
    stages: tuple[StageBytes, ...]
    block_size: int | None = None
    notes: tuple[str, ...] = field(default=())
    padding: str = ""  # non-empty when the engine rounds the load up (blocks, 256-cell context)

    @property
    def per_rank_max_bytes(self) -> int:
        """The largest bytes any single rank holds (the one that must fit)."""
        return max(s.bytes_per_rank for s in self.stages)

    @property
    def replica_bytes(self) -> int:
        """One model replica: every stage, every TP rank."""
        return sum(s.bytes_per_rank for s in self.stages) * self.tp

    @property
    def total_bytes(self) -> int:
        """The whole deployment (``dp`` replicas)."""
        return self.replica_bytes * self.dp

    @property
    def bytes_per_sequence(self) -> int:
        """One sequence across one replica's ranks."""
        return sum(s.bytes_per_sequence_per_rank for s in self.stages) * self.tp

    @property
    def bytes_per_token(self) -> int:
        """Growth per cached token of one sequence across one replica (before windows fill)."""
        return sum(s.bytes_per_token_per_rank for s in self.stages) * self.tp

    def groups(self) -> list[GroupBytes]:
        return [g for s in self.stages for g in s.groups]


def check_load(tokens: int, seqs: int, tp: int, pp: int, dp: int) -> None:
    """Refuse non-positive counts with a one-line error naming the field."""
    for name, value in (("tokens", tokens), ("seqs", seqs), ("tp", tp), ("pp", pp), ("dp", dp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}: must be an integer >= 1, got {value!r}", field=name)


class LayoutNotApplicable(KvbudgetError):
    """The engine layout cannot represent this structure; the result is ``not_applicable``
    (``calc`` reports it as that status; a command that needs the layout, such as ``plan``,
    refuses in one line)."""

    kind = "NotApplicableError"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: the way out of a layout's refusal: transformers' figure (``calc`` has the hf layout; ``plan``
#: plans an engine's pool and has none) or the engine itself
HF_HINT = (
    "kvbudget calc --engine hf gives transformers' own figure; measure the engine for its pool"
)


def refuse_compressed(spec: ModelSpec, engine: Layout, reason: str) -> None:
    """A layout that does not model DeepSeek-V4's compressed attention refuses the model in one
    line, with ``reason`` (why this engine's layout has no rule for it)."""
    if any(layer.kind in COMPRESSED_KINDS for layer in spec.layer_seq.distinct()):
        raise LayoutNotApplicable(
            f"{spec.model_type}: compressed attention (a sliding K=V window plus compressed "
            f"entries per layer) is not modelled by the {engine} layout: {reason}; {HF_HINT}"
        )


def refuse_short_convs(spec: ModelSpec, engine: Layout, reason: str) -> None:
    """A layout that does not model Inkling's float32 short-convolution states refuses in one
    line, with ``reason``."""
    for layer in spec.layer_seq.distinct():
        state = getattr(layer, "state", layer)
        if getattr(state, "state_kind", None) == "sconv_fp32":
            raise LayoutNotApplicable(
                f"{spec.model_type}: its short-convolution states beside attention are not "
                f"modelled by the {engine} layout: {reason}; {HF_HINT}"
            )


def refuse_sliding_latent(spec: ModelSpec, engine: Layout, reason: str) -> None:
    """A layout without a rule for sliding-window MLA layers (Dots3-Note) refuses in one line."""
    if has_sliding_latent(spec.layer_seq):
        raise LayoutNotApplicable(
            f"{spec.model_type}: its sliding-window MLA layers are not modelled by the {engine} "
            f"layout: {reason}; {HF_HINT}"
        )


def refuse_indexer(spec: ModelSpec, engine: Layout) -> None:
    """A layout that does not model a sparse-attention indexer's key cache refuses the model
    rather than give the K/V or latent alone (a partial number)."""
    if has_indexer(spec.layers):
        raise LayoutNotApplicable(
            f"{spec.model_type}: its sparse-attention indexer keeps its own key cache, which the "
            f"{engine} layout does not model yet; {HF_HINT}"
        )


#: a pipeline split: ``(num_layers, pp_rank, pp_size) -> [start, end)``
PpSplit: TypeAlias = Callable[[int, int, int], tuple[int, int]]

#: from this version SGLang gives the remainder to the last stages (0.5.23
#: ``distributed/utils.py`` ``get_pp_indices`` lines 110-150); 0.5.4's (same file, lines 63-93)
#: gives it all to the last stage. The release between them it changed in is not known: assumed
#: 0.5.23, the one kvbudget read
SGLANG_PP_TAIL_SPLIT_VERSION = (0, 5, 23)


def sglang_pp_split(version: tuple[int, ...]) -> PpSplit:
    """SGLang's ``get_pp_indices`` of ``version`` (``SGLANG_PP_LAYER_PARTITION`` not modelled):
    ``L // pp`` layers a stage; 0.5.23 adds one to each of the last ``L % pp`` stages, 0.5.4
    puts the whole remainder on the last stage."""
    tail = tuple(version) >= SGLANG_PP_TAIL_SPLIT_VERSION

    def split(num_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
        get_pp_indices(num_layers, pp_rank, pp_size)  # the same refusals as vLLM's
        base, remainder = divmod(num_layers, pp_size)
        if not tail:  # lines 86-91
            start = pp_rank * base
            return start, num_layers if pp_rank == pp_size - 1 else start + base
        if pp_rank >= pp_size - remainder:  # lines 137-144
            start = pp_rank * (base + 1) - (pp_size - remainder)
            return start, start + base + 1
        return pp_rank * base, pp_rank * base + base  # lines 145-148

    return split


def get_pp_indices(num_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """``[start, end)`` of the layers pipeline stage ``pp_rank`` holds.

    vLLM's split (``vllm/distributed/utils.py`` ``get_pp_indices``): ``L // pp`` layers per stage;
    the remainder adds one layer to stages ``[-2], [-3], ...``, never to the last.
    """
    from kvbudget.errors import ConfigError

    if pp_size < 1 or not 0 <= pp_rank < pp_size:
        raise ConfigError(
            f"pp_rank: {pp_rank} is outside 0..{pp_size - 1}; choose a rank below --pp",
            field="pp_rank",
        )
    if pp_size > num_layers:
        raise ConfigError(
            f"pp: {pp_size} stages for {num_layers} layers; choose --pp <= {num_layers}", field="pp"
        )
    partitions = [num_layers // pp_size] * pp_size
    for i in range(2, num_layers % pp_size + 2):
        partitions[-i] += 1
    start = sum(partitions[:pp_rank])
    return start, start + partitions[pp_rank]


def heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """KV heads one TP rank holds: ``max(1, kv_heads // tp)`` (replicated when kv_heads < tp).

    vLLM and SGLang refuse a TP size that neither divides nor is a multiple of the KV heads.
    """
    from kvbudget.errors import ConfigError

    if tp < 1:
        raise ConfigError(f"tp: must be >= 1, got {tp}", field="tp")
    if num_kv_heads % tp and tp % num_kv_heads:
        raise ConfigError(
            f"tp: {tp} neither divides the {num_kv_heads} KV heads nor is a multiple of them; the engines "
            "refuse this; choose a TP size that divides or is a multiple of the KV heads",
            field="tp",
        )
    return max(1, num_kv_heads // tp)


def group_key(layer: object) -> tuple[str, int | None]:
    """Layers are grouped by kind and window/chunk size."""
    kind = str(getattr(layer, "kind", "none"))
    return kind, getattr(layer, "sliding_window", None) or getattr(
        layer, "attention_chunk_size", None
    )
