"""Why a sliding-window (or chunked-local) group keeps few blocks per sequence while vLLM's
"Maximum concurrency" figure charges it many (issue #32 item 5).

Two vLLM rules, both already encoded in this package:

* **kept**: once a sequence of ``L`` tokens is decoding, a sliding layer holds only the blocks its
  window touches; older blocks go back to the pool (``SlidingWindowManager`` skips
  ``max(0, T - W)`` tokens; :func:`kvbudget.capacity.layouts.vllm_specs.blocks_held`). Window 128,
  block 16: 8 blocks. A chunked-local layer keeps its current chunk's blocks.
* **charged**: the maximum-concurrency figure divides the pool by each group's
  ``max_memory_usage_bytes`` / page (vLLM ``SlidingWindowSpec``:
  ``cdiv(min(W - 1 + T_b, L), B) + 1``; ``ChunkedLocalAttentionSpec``: ``cdiv(min(C + T_b, L),
  B)``; :func:`kvbudget.capacity.layouts.vllm_specs.max_memory_usage_bytes`): the peak while a prefill
  chunk of up to ``T_b = max_num_batched_tokens`` tokens is computed beside the ``W - 1`` window
  tokens before it. Window 128, ``T_b`` 8,192, block 16: ``cdiv(8,319, 16) + 1 = 521``.

So the logged concurrency charges every sequence its prefill peak at once; with every sequence
decoding at ``L`` tokens, the same blocks hold ``num_blocks / Σ_g kept_g`` of them. Both figures
are computed from the plan's own groups; nothing here changes the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.engines.registry import engine_is
from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec, blocks_held
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.capacity.pool import KvCacheGroup
from kvbudget.capacity.versions import vllm_behaviour


@dataclass(frozen=True, slots=True)
class GroupBlocks:
    """One KV cache group: blocks one max-length sequence keeps once decoding, and charges."""

    group_id: int
    kind: str
    kept: int
    charged: int


@dataclass(frozen=True, slots=True)
class WindowCharge:
    """The groups of one window (or chunk) size and what each keeps and is charged."""

    kind: str  # "sliding" or "chunked"
    window_tokens: int
    block_size: int
    group_ids: tuple[int, ...]
    kept: int
    charged: int


@dataclass(frozen=True, slots=True)
class WindowCharges:
    windows: tuple[WindowCharge, ...]
    num_blocks: int
    max_model_len: int
    #: the tokens a window group reserves for beside its window: max_num_batched_tokens x the
    #: batches in flight (vLLM 0.26+ ``max_in_flight_tokens``)
    max_num_batched_tokens: int
    in_flight_batches: int
    max_concurrency: float
    kept_per_sequence: int
    charged_per_sequence: int

    def _in_flight_words(self) -> str:
        if self.in_flight_batches <= 1:
            return "max_num_batched_tokens"
        return (
            f"{self.in_flight_batches} batches in flight x max_num_batched_tokens, vLLM "
            "max_in_flight_tokens"
        )

    @property
    def decode_concurrency(self) -> float:
        """Max-length sequences the pool holds when every one of them is decoding."""
        return self.num_blocks / self.kept_per_sequence

    def lines(self) -> list[str]:
        """One sentence per window size, then what it means for the concurrency figure."""
        L, t_b = self.max_model_len, self.max_num_batched_tokens
        out = []
        for w in self.windows:
            s = "s" if len(w.group_ids) > 1 else ""
            ids = _id_ranges(w.group_ids)
            if w.kind == "sliding":
                what = f"sliding window {w.window_tokens:,} tokens (group{s} {ids})"
                kept = "the blocks its window touches; older ones go back to the pool"
                rule = (
                    f"cdiv(min({w.window_tokens - 1:,} + {t_b:,}, {L:,}), {w.block_size}) + 1, "
                    "vLLM SlidingWindowSpec.max_memory_usage_bytes"
                )
                beside = f"the {w.window_tokens - 1:,} window tokens before it"
            else:
                what = f"chunked local attention, chunk {w.window_tokens:,} tokens (group{s} {ids})"
                kept = "its current chunk's blocks"
                rule = (
                    f"cdiv(min({w.window_tokens:,} + {t_b:,}, {L:,}), {w.block_size}), "
                    "vLLM ChunkedLocalAttentionSpec.max_memory_usage_bytes"
                )
                beside = "its chunk"
            out.append(
                f"{what}: each {L:,}-token sequence keeps {w.kept:,} blocks of {w.block_size} "
                f"tokens per group once decoding ({kept}); the maximum-concurrency figure "
                f"charges it {w.charged:,} per group, its peak while a prefill chunk of up to "
                f"{t_b:,} tokens ({self._in_flight_words()}) is computed beside {beside} ({rule})"
            )
        out.append(
            f"so {self.max_concurrency:.2f}x ({self.num_blocks:,} blocks / "
            f"{self.charged_per_sequence:,} charged per sequence) counts every sequence at its "
            f"prefill peak at once; with all of them decoding at {L:,} tokens each keeps "
            f"{self.kept_per_sequence:,} blocks and the pool holds "
            f"{self.decode_concurrency:.2f} (computed; the scheduler admits by the blocks free "
            f"at each step, and prefills at most {t_b:,} tokens a step)"
        )
        return out


def _id_ranges(ids: tuple[int, ...]) -> str:
    """``(0, 1, 2, 3, 5) -> '0-3, 5'``."""
    parts: list[str] = []
    start = prev = ids[0]
    for i in (*ids[1:], None):
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


def _spec(group: KvCacheGroup, result: PlanResult) -> VllmLayerSpec:
    return VllmLayerSpec(
        layer_index=0,
        kind=group.kind,
        block_size=group.block_size,
        page_size_bytes=group.page_size_bytes,
        sliding_window=group.sliding_window,
        attention_chunk_size=group.attention_chunk_size,
        num_speculative_blocks=group.num_speculative_blocks,
        mamba_cache_mode=result.mamba_cache_mode,
        num_checkpoint_blocks=group.num_checkpoint_blocks,
    )


def group_blocks(result: PlanResult) -> list[GroupBlocks] | None:
    """Per KV cache group, the blocks one max-length sequence keeps once decoding and the
    blocks the concurrency figure charges it; ``None`` where the figure does not charge per
    group (not vLLM, or a version that divides tokens by the length)."""
    if not engine_is(result.engine, lambda e: e.group_blocks) or not result.groups:
        return None
    if vllm_behaviour(result.engine_version).concurrency == "tokens_over_len":
        return None
    L, t_b = result.max_model_len, result.in_flight_tokens
    return [
        GroupBlocks(
            group_id=g.group_id,
            kind=g.kind,
            kept=blocks_held(_spec(g, result), L),
            charged=g.max_blocks_per_request(L, t_b, result.mamba_cache_mode),
        )
        for g in result.groups
    ]


def window_charges(result: PlanResult) -> WindowCharges | None:
    """The explanation for a plan whose sliding/chunked groups are charged more blocks than a
    decoding sequence keeps; ``None`` when there is nothing to explain."""
    blocks = group_blocks(result)
    if not blocks:
        return None
    by_id = {g.group_id: g for g in result.groups}
    windows: dict[tuple[str, int, int], list[GroupBlocks]] = {}
    for b in blocks:
        g = by_id[b.group_id]
        size = g.sliding_window if g.kind == "sliding" else g.attention_chunk_size
        if g.kind in ("sliding", "chunked") and size is not None and b.charged != b.kept:
            windows.setdefault((g.kind, size, g.block_size), []).append(b)
    if not windows:
        return None
    return WindowCharges(
        windows=tuple(
            WindowCharge(
                kind=kind,
                window_tokens=size,
                block_size=block,
                group_ids=tuple(b.group_id for b in members),
                kept=members[0].kept,
                charged=members[0].charged,
            )
            for (kind, size, block), members in windows.items()
        ),
        num_blocks=result.num_blocks,
        max_model_len=result.max_model_len,
        max_num_batched_tokens=result.in_flight_tokens,
        in_flight_batches=result.in_flight_tokens // result.max_num_batched_tokens,
        max_concurrency=result.max_concurrency,
        kept_per_sequence=sum(b.kept for b in blocks),
        charged_per_sequence=sum(b.charged for b in blocks),
    )
