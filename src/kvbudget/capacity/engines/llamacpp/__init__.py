"""llama.cpp: its KV cells (``calc --engine llamacpp``); its slots are no block pool ``plan`` models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.capacity.engines.registry import (
    LayoutLoad,
    RegisteredEngine,
    refuse_block_size,
    register_engine,
)
from kvbudget.capacity.layouts.llamacpp import llamacpp_layout

if TYPE_CHECKING:
    from kvbudget.capacity.layouts.base import LayoutResult
    from kvbudget.spec.model import ModelSpec


def layout(spec: ModelSpec, load: LayoutLoad) -> LayoutResult:
    refuse_block_size(load, "llamacpp")
    return llamacpp_layout(
        spec,
        tokens=load.tokens,
        seqs=load.seqs,
        kv_dtype=load.kv_dtype,
        v_dtype=load.v_dtype,
        tp=load.tp,
        pp=load.pp,
        dp=load.dp,
        ctx_size=load.ctx_size,
        unified=load.unified,
    )


ENGINE = register_engine(
    RegisteredEngine(
        "llamacpp",
        layout,
        listed_at=3,
        slot_cells=True,
        # per-slot cells, no block hashing: a prompt is matched against the slot's tokens
        prefix_layout=("1", "slot-prompt-match"),
        label="llama.cpp",
    )
)
