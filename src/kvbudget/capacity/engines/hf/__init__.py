"""transformers' own cache (``calc --engine hf``): a layout only, no engine to plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.capacity.engines.registry import (
    LayoutLoad,
    RegisteredEngine,
    refuse_block_size,
    refuse_llamacpp_knobs,
    register_engine,
)
from kvbudget.capacity.layouts.hf import hf_layout

if TYPE_CHECKING:
    from kvbudget.capacity.layouts.base import LayoutResult
    from kvbudget.spec.model import ModelSpec


def layout(spec: ModelSpec, load: LayoutLoad) -> LayoutResult:
    refuse_llamacpp_knobs(load, "hf")
    refuse_block_size(load, "hf")
    return hf_layout(
        spec,
        tokens=load.tokens,
        seqs=load.seqs,
        kv_dtype=load.kv_dtype,
        tp=load.tp,
        pp=load.pp,
        dp=load.dp,
    )


ENGINE = register_engine(
    RegisteredEngine("hf", layout, serves=False, listed_at=0, label="Hugging Face transformers")
)
