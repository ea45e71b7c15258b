"""One frozen dataclass per layer kind; each knows its own structural bytes.

Structural bytes are the engine-neutral size of what a layer must keep per token (attention
kinds) or per sequence (state kinds) for a given element size in bytes. Engine layouts
(``kvbudget.capacity.layouts``) decide blocks, padding, groups, windows and per-rank splits on
top of these fields; a layer never decides how an engine pages it.

Kinds (``kind`` class attribute):

* ``full``: ordinary softmax attention (MHA, GQA, MQA): K and V of ``num_kv_heads`` heads.
* ``sliding``: sliding-window attention; stores the same per token, but only the last window.
* ``chunked``: chunked local attention (Llama 4): attends inside ``attention_chunk_size`` chunks.
* ``mla``: multi-head latent attention (DeepSeek-V2/V3): one latent of ``kv_lora_rank`` plus
  the shared rotary key ``qk_rope_head_dim`` per token, no factor 2, not split by tensor parallel.
  A sliding MLA layer (``sliding_window`` > 0, Dots3-Note) keeps only its window.
* ``state``: fixed-size recurrent state (Mamba, Mamba2, gated delta net, lightning/linear
  attention): bytes per sequence, whatever the length.
* ``shared``: reuses another layer's K/V (Gemma-3n): stores nothing itself.
* ``hybrid``: a parallel hybrid decoder layer (Falcon-H1) that holds both an attention cache and
  a recurrent state; :func:`cache_parts` splits it into its two cache entries, both with the
  decoder layer's index, so layer counts stay decoder-layer counts.
* ``none``: a layer with no attention cache at all.
* ``compressed_sparse`` / ``heavily_compressed``: DeepSeek-V4's compressed attention (CSA / HCA):
  a sliding window of one shared K=V head plus one compressed entry per ``compress_rate`` tokens
  (CSA also an indexer key per entry); see :class:`CompressedAttention`.

The ``state`` kind, :class:`~kvbudget.spec.state_layers.StateLayer`, lives in
:mod:`kvbudget.spec.state_layers`; the kind names and the questions asked of a list of layers
(:func:`~kvbudget.spec.layer_kinds.has_indexer`) in :mod:`kvbudget.spec.layer_kinds`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import ClassVar

from kvbudget.spec.state_layers import StateLayer


def _check_positive(name: str, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")


@dataclass(frozen=True, slots=True)
class FullAttention:
    """Full softmax attention: K (``head_dim``) and V (``v_head_dim``) for each KV head per token."""

    kind: ClassVar[str] = "full"
    layer_index: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int = 0  # 0 means "same as head_dim"
    #: a sparse-attention indexer's key cached beside K/V, one head (MiniMax-M3); 0 = none
    index_head_dim: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        _check_positive("num_kv_heads", self.num_kv_heads)
        _check_positive("head_dim", self.head_dim)

    @property
    def v_dim(self) -> int:
        """V head size (``head_dim`` unless the model declares a different one)."""
        return self.v_head_dim or self.head_dim

    def elements_per_token(self) -> int:
        """K plus V elements one token needs in this layer (all KV heads), plus the indexer key."""
        return self.num_kv_heads * (self.head_dim + self.v_dim) + self.index_head_dim

    def bytes_per_token(self, element_bytes: int) -> int:
        """Structural bytes per token: ``num_kv_heads * (head_dim + v_head_dim) * element_bytes``."""
        return self.elements_per_token() * element_bytes

    def bytes_per_sequence(self, num_tokens: int, element_bytes: int) -> int:
        """Bytes one sequence of ``num_tokens`` keeps in this layer."""
        return self.kept_tokens(num_tokens) * self.bytes_per_token(element_bytes)

    def kept_tokens(self, num_tokens: int) -> int:
        """Tokens this layer keeps for a sequence of ``num_tokens`` (all of them)."""
        return num_tokens


@dataclass(frozen=True, slots=True)
class SlidingWindow(FullAttention):
    """Sliding-window attention: like full attention but only the last ``sliding_window`` matter.

    Structurally a sequence needs at most ``sliding_window`` tokens; what an engine really
    keeps (transformers ``window - 1``, vLLM whole blocks plus one) is the layout's business.
    """

    kind: ClassVar[str] = "sliding"
    sliding_window: int = 0

    def __post_init__(self) -> None:
        FullAttention.__post_init__(self)
        _check_positive("sliding_window", self.sliding_window)

    def kept_tokens(self, num_tokens: int) -> int:
        return min(num_tokens, self.sliding_window)


@dataclass(frozen=True, slots=True)
class ChunkedLocal(FullAttention):
    """Chunked local attention (Llama 4 RoPE layers): tokens attend within their chunk.

    Structurally at most ``attention_chunk_size`` tokens are needed per sequence.
    """

    kind: ClassVar[str] = "chunked"
    attention_chunk_size: int = 0

    def __post_init__(self) -> None:
        FullAttention.__post_init__(self)
        _check_positive("attention_chunk_size", self.attention_chunk_size)

    def kept_tokens(self, num_tokens: int) -> int:
        return min(num_tokens, self.attention_chunk_size)


@dataclass(frozen=True, slots=True)
class MLA:
    """Multi-head latent attention: one latent vector per token, shared by all heads.

    Per token per layer: ``kv_lora_rank + qk_rope_head_dim`` elements (DeepSeek-V2/V3: 576).
    No factor 2 (the latent serves K and V) and tensor parallel does not split it. With a
    sparse-attention indexer (DeepSeek-V3.2, GLM-5: layer type ``indexed_attention``) one more key
    of ``index_head_dim`` per token (transformers ``DynamicIndexedLayer.indexer_keys``).
    """

    kind: ClassVar[str] = "mla"
    layer_index: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    num_heads: int = 0  # query heads; never used for bytes
    index_head_dim: int = field(default=0, kw_only=True)
    #: bytes of one indexer-key element when the model keeps it in its own dtype (Dots3-Note: 4,
    #: float32); 0 = the cache's element size
    index_element_bytes: int = field(default=0, kw_only=True)
    #: a sliding-window MLA layer keeps only the last ``sliding_window`` latents (Dots3-Note's
    #: ``sliding_attention`` layers); 0 = every token (full)
    sliding_window: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        _check_positive("kv_lora_rank", self.kv_lora_rank)
        _check_positive("qk_rope_head_dim", self.qk_rope_head_dim)
        if self.sliding_window < 0 or self.index_element_bytes < 0:
            raise ValueError("sliding_window and index_element_bytes must be >= 0")

    @property
    def latent_dim(self) -> int:
        """Elements of the cached latent per token: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def elements_per_token(self) -> int:
        return self.latent_dim + self.index_head_dim

    def index_bytes_per_token(self, element_bytes: int) -> int:
        """Bytes of the indexer key one token keeps (0 without an indexer)."""
        return self.index_head_dim * (self.index_element_bytes or element_bytes)

    def bytes_per_token(self, element_bytes: int) -> int:
        """Latent at ``element_bytes`` plus the indexer key at its own element size."""
        return self.latent_dim * element_bytes + self.index_bytes_per_token(element_bytes)

    def kept_tokens(self, num_tokens: int) -> int:
        """All tokens, or the last ``sliding_window`` of a sliding layer."""
        return min(num_tokens, self.sliding_window) if self.sliding_window else num_tokens

    def bytes_per_sequence(self, num_tokens: int, element_bytes: int) -> int:
        return self.kept_tokens(num_tokens) * self.bytes_per_token(element_bytes)


@dataclass(frozen=True, slots=True)
class KVShared:
    """A layer that reuses the K/V of ``source_layer_index`` (Gemma-3n); it stores nothing.

    ``source_kind`` is the kind of the layer it reads (``full`` or ``sliding``).
    """

    kind: ClassVar[str] = "shared"
    layer_index: int
    source_layer_index: int
    source_kind: str = "full"

    def bytes_per_token(self, element_bytes: int) -> int:
        return 0

    def kept_tokens(self, num_tokens: int) -> int:
        return 0

    def bytes_per_sequence(self, num_tokens: int, element_bytes: int) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class NoAttention:
    """A layer without any attention cache (e.g. a pure MLP block)."""

    kind: ClassVar[str] = "none"
    layer_index: int

    def bytes_per_token(self, element_bytes: int) -> int:
        return 0

    def kept_tokens(self, num_tokens: int) -> int:
        return 0

    def bytes_per_sequence(self, num_tokens: int, element_bytes: int) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class ParallelHybrid:
    """One decoder layer whose attention and state-space branches run side by side (Falcon-H1).

    It caches both: the attention branch's K/V per token and the Mamba-2 branch's state per
    sequence (transformers 5 ``LinearAttentionAndFullAttentionLayer`` for layer type
    ``"hybrid"``, ``cache_utils.py``; vLLM 0.32 ``FalconH1ParallelHybrid`` registers an
    ``Attention`` and a ``MambaMixer2`` per decoder layer, ``models/falcon_h1.py``). Both parts
    carry this layer's ``layer_index`` (set here, so ``replace(layer, layer_index=i)`` moves
    both parts with it).
    """

    kind: ClassVar[str] = "hybrid"
    layer_index: int
    attention: FullAttention
    state: StateLayer

    def __post_init__(self) -> None:
        for name in ("attention", "state"):
            part = getattr(self, name)
            if part.layer_index != self.layer_index:
                object.__setattr__(self, name, replace(part, layer_index=self.layer_index))

    @property
    def num_kv_heads(self) -> int:
        """The attention branch's KV heads."""
        return self.attention.num_kv_heads

    @property
    def head_dim(self) -> int:
        """The attention branch's head size."""
        return self.attention.head_dim

    def bytes_per_token(self, element_bytes: int) -> int:
        """The attention branch's bytes per token (the state does not grow)."""
        return self.attention.bytes_per_token(element_bytes)

    def kept_tokens(self, num_tokens: int) -> int:
        return self.attention.kept_tokens(num_tokens)

    def bytes_per_sequence(self, num_tokens: int, element_bytes: int) -> int:
        """Attention bytes for ``num_tokens`` plus one state."""
        return self.attention.bytes_per_sequence(
            num_tokens, element_bytes
        ) + self.state.bytes_per_sequence(num_tokens, element_bytes)


@dataclass(frozen=True, slots=True)
class CompressedAttention:
    """DeepSeek-V4 heavily compressed attention (HCA, layer type ``heavily_compressed_attention``).

    Per sequence it keeps a sliding window of one shared K=V head of ``head_dim`` (MQA; K is V)
    and, for the long range, one compressed entry of ``head_dim`` per ``compress_rate`` tokens
    (transformers ``modeling_deepseek_v4.py`` ``DeepseekV4HCACache``; paper section 2.3.2).
    Structurally a sequence of T tokens needs ``min(T, sliding_window) + T // compress_rate``
    entries of ``head_dim``; what transformers also buffers (the tokens of the window not yet
    compressed, their gates) is the hf layout's business.
    """

    kind: ClassVar[str] = "heavily_compressed"
    layer_index: int
    head_dim: int
    sliding_window: int
    compress_rate: int
    #: the indexer key cached per compressed entry (CSA only; 0 = none)
    index_head_dim: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        _check_positive("head_dim", self.head_dim)
        _check_positive("sliding_window", self.sliding_window)
        _check_positive("compress_rate", self.compress_rate)

    @property
    def num_kv_heads(self) -> int:
        """One shared K=V head (``num_key_value_heads`` is 1 in DeepSeek-V4)."""
        return 1

    def compressed_entries(self, num_tokens: int) -> int:
        """Compressed entries a sequence of ``num_tokens`` has: one per closed window."""
        return num_tokens // self.compress_rate

    def bytes_per_token(self, element_bytes: int) -> int:
        """Growth per token while the window fills: the shared K=V head (the compressed branch
        adds ``(head_dim + index_head_dim) / compress_rate`` more, counted per sequence)."""
        return self.head_dim * element_bytes

    def kept_tokens(self, num_tokens: int) -> int:
        """Raw tokens kept: the sliding window."""
        return min(num_tokens, self.sliding_window)

    def bytes_per_sequence(self, num_tokens: int, element_bytes: int) -> int:
        """Window entries plus compressed entries (and their indexer keys)."""
        window = self.kept_tokens(num_tokens) * self.head_dim
        compressed = self.compressed_entries(num_tokens) * (self.head_dim + self.index_head_dim)
        return (window + compressed) * element_bytes


@dataclass(frozen=True, slots=True)
class CompressedSparseAttention(CompressedAttention):
    """DeepSeek-V4 compressed sparse attention (CSA, ``compressed_sparse_attention``): HCA's
    window and compressed entries at a smaller rate (4), overlapping windows (two series of
    ``head_dim`` per source token), and a lightning indexer that keeps its own compressed key of
    ``index_head_dim`` per entry (``DeepseekV4CSACache``; paper section 2.3.1)."""

    kind: ClassVar[str] = "compressed_sparse"


LayerSpec = (
    FullAttention
    | SlidingWindow
    | ChunkedLocal
    | MLA
    | StateLayer
    | KVShared
    | NoAttention
    | ParallelHybrid
    | CompressedAttention
)
#: a single cache entry: every layer kind but ``hybrid`` (see :func:`cache_parts`)
CacheLayer = (
    FullAttention
    | SlidingWindow
    | ChunkedLocal
    | MLA
    | StateLayer
    | KVShared
    | NoAttention
    | CompressedAttention
)


def cache_parts(layers: Iterable[LayerSpec]) -> list[CacheLayer]:
    """Each decoder layer's cache entries in order: a hybrid layer gives its attention part,
    then its state part (both with the decoder layer's index); every other layer gives itself."""
    out: list[CacheLayer] = []
    for layer in layers:
        if isinstance(layer, ParallelHybrid):
            out.extend((layer.attention, layer.state))
        else:
            out.append(layer)
    return out
