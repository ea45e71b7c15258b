"""llama.cpp layout: a preallocated cache of cells x layers, one K and one V tensor per layer.

Sources: ``/work/shared/reference/llamacpp.md`` §3–§4 (``src/llama-context.cpp``,
``src/llama-kv-cache.cpp``) and ``src/llama-kv-cache-iswa.cpp``:

* ``n_ctx = GGML_PAD(n_ctx, 256)``; not unified (``-np N``): ``n_ctx_seq = GGML_PAD(n_ctx / N, 256)``
  cells in each of ``N`` streams; unified (``-kvu``): one stream of ``n_ctx`` cells.
* Per layer: ``ggml_new_tensor_3d(type, n_embd_{k,v}_gqa, kv_size, n_stream)``, so
  ``bytes = cells x row_bytes(type, n_head_kv * head_dim)`` for K and for V, with ggml block types
  (q8_0 34 B / 32 elements, q4_0 18 B / 32, ...). K and V types are chosen separately (-ctk/-ctv).
* Sliding-window (and chunked) layers live in a second cache of
  ``min(kv_size, GGML_PAD(n_swa * (unified ? n_seq : 1) + n_ubatch, 256))`` cells per stream
  (``swa_full`` off; ``n_ubatch`` default 512).
* Recurrent layers (Mamba, gated delta net): f32 conv ``(kernel-1) x channels`` and f32 state per
  sequence. MLA and lightning attention are not modelled (the layout changes between versions).
* Falcon-H1: ``llama_model::create_memory`` (``src/llama-model.cpp``) builds a
  ``llama_memory_hybrid`` whose attention and recurrent filters both accept every layer, so each
  decoder layer has K/V cells and a recurrent state.
* One ``llama-server`` process: ``tp``/``pp`` are 1; ``dp`` counts servers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.layouts.base import (
    HF_HINT,
    GroupBytes,
    LayoutNotApplicable,
    LayoutResult,
    StageBytes,
    check_load,
    refuse_compressed,
    refuse_indexer,
    refuse_short_convs,
    refuse_sliding_latent,
)
from kvbudget.capacity.layouts.grouping import group_by_kind
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import FullAttention, StateLayer, has_indexer
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.traits import MINIMAX_M3_TYPES
from kvbudget.units import cdiv

PAD = 256
#: the llama.cpp source these refusals were read from: llama-cpp-python 0.3.36's vendored copy
#: (``vendor/llama.cpp``, the build ``scripts/llama-server.sh`` makes, VERSION commit 0c1e570)
LLAMACPP_SOURCE = "0c1e570 (llama-cpp-python 0.3.36)"
#: kvbudget's MiniMax-M3 text types (llama.cpp's LLM_ARCH_MINIMAX_M3, src/llama-arch.cpp line 140)
LLAMACPP_MSA_TYPES = MINIMAX_M3_TYPES
F32_BYTES = 4


def pad256(value: int) -> int:
    """``GGML_PAD(value, 256)``."""
    return cdiv(value, PAD) * PAD


def llamacpp_cells(
    tokens: int, seqs: int, *, ctx_size: int | None, unified: bool
) -> tuple[int, int]:
    """(cells per stream, streams) for ``-c ctx_size -np seqs`` (ctx defaults to tokens x seqs)."""
    n_ctx = pad256(ctx_size if ctx_size is not None else tokens * seqs)
    if unified:
        return n_ctx, 1
    return pad256(n_ctx // seqs), seqs


def _layer_cells(cells: int, window: int | None, seqs: int, *, unified: bool, n_ubatch: int) -> int:
    """Cells per stream of a layer: all of them, or the SWA cache's for a windowed layer."""
    if window is None:
        return cells
    return min(cells, pad256(window * (seqs if unified else 1) + n_ubatch))


@dataclass(frozen=True, slots=True)
class LlamacppKV:
    """K and V bytes as llama.cpp logs them (``K (q8_0): ... MiB, V (f16): ... MiB``), summed over
    its attention caches (full and SWA); recurrent states are not included."""

    n_ctx: int  # total cells after padding (cells_per_stream x streams)
    cells_per_stream: int
    streams: int
    k_type: str
    v_type: str
    k_bytes: int
    v_bytes: int


def llamacpp_kv_split(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str = "auto",
    v_dtype: str | None = None,
    ctx_size: int | None = None,
    unified: bool = False,
    n_ubatch: int = 512,
) -> LlamacppKV:
    """K and V bytes separately for ``-c ctx_size -np seqs [-kvu] -ctk kv_dtype -ctv v_dtype``."""
    k_type = get_kv_dtype(kv_dtype, engine="llamacpp", model_dtype=spec.torch_dtype)
    v_type = get_kv_dtype(v_dtype or kv_dtype, engine="llamacpp", model_dtype=spec.torch_dtype)
    cells, streams = llamacpp_cells(tokens, seqs, ctx_size=ctx_size, unified=unified)
    k_bytes = v_bytes = 0
    for (_, window), layers in group_by_kind(spec.layers):
        n = _layer_cells(cells, window, seqs, unified=unified, n_ubatch=n_ubatch) * streams
        for x, indices in layers.runs:
            if isinstance(x, FullAttention):
                k_bytes += n * k_type.row_bytes(x.num_kv_heads * x.head_dim) * len(indices)
                v_bytes += n * v_type.row_bytes(x.num_kv_heads * x.v_dim) * len(indices)
    return LlamacppKV(cells * streams, cells, streams, k_type.name, v_type.name, k_bytes, v_bytes)


def llamacpp_layout(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str = "auto",
    v_dtype: str | None = None,
    ctx_size: int | None = None,
    unified: bool = False,
    n_ubatch: int = 512,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
) -> LayoutResult:
    """Bytes llama.cpp allocates for ``-c ctx_size -np seqs`` (``-ctk kv_dtype -ctv v_dtype``)."""
    check_load(tokens, seqs, tp, pp, dp)
    refuse_short_convs(
        spec,
        "llamacpp",
        f"llama.cpp {LLAMACPP_SOURCE} has no Inkling architecture (no LLM_ARCH for it in "
        "src/llama-arch.cpp), so it cannot load one",
    )
    refuse_sliding_latent(spec, "llamacpp", "kvbudget has not read how llama.cpp caches it")
    refuse_compressed(
        spec,
        "llamacpp",
        f"llama.cpp {LLAMACPP_SOURCE} serves deepseek4 with its own llama_kv_cache_dsv4 "
        "(src/llama-kv-cache-dsv4.cpp; src/llama-model.cpp line 2613), which kvbudget has not "
        "read",
    )
    if spec.model_type in LLAMACPP_MSA_TYPES and has_indexer(spec.layer_seq):
        raise LayoutNotApplicable(
            f"{spec.model_type}: llama.cpp {LLAMACPP_SOURCE} serves minimax-m3 with "
            "llama_kv_cache_msa, the K/V cache plus a one-head indexer cache on the layers past "
            "n_layer_dense_lead (src/llama-kv-cache-msa.cpp lines 32-49; src/llama-model.cpp "
            f"lines 2375-2395), which kvbudget has not modelled; {HF_HINT}"
        )
    refuse_indexer(spec, "llamacpp")
    if tp != 1 or pp != 1:
        raise ConfigError(
            f"tp/pp: the llamacpp layout is one llama-server; got tp={tp} pp={pp}; use --dp",
            field="tp",
        )
    k_type = get_kv_dtype(kv_dtype, engine="llamacpp", model_dtype=spec.torch_dtype)
    v_type = get_kv_dtype(v_dtype or kv_dtype, engine="llamacpp", model_dtype=spec.torch_dtype)
    cells, streams = llamacpp_cells(tokens, seqs, ctx_size=ctx_size, unified=unified)
    if not unified and cells < tokens:
        raise ConfigError(
            f"ctx_size: {ctx_size} gives {cells} cells per slot, fewer than tokens={tokens}; "
            f"raise -c to at least {tokens * seqs}",
            field="ctx_size",
        )
    groups: list[GroupBytes] = []
    for (kind, window), layers in group_by_kind(spec.layers):
        indices = layers.indices
        first = layers.first
        if isinstance(first, FullAttention):
            rows = layers.total(
                lambda x: (
                    k_type.row_bytes(x.num_kv_heads * x.head_dim)
                    + v_type.row_bytes(x.num_kv_heads * x.v_dim)
                    if isinstance(x, FullAttention)
                    else 0
                )
            )
            layer_cells = _layer_cells(cells, window, seqs, unified=unified, n_ubatch=n_ubatch)
            total = rows * layer_cells * streams
            groups.append(
                GroupBytes(
                    kind,
                    indices,
                    layer_cells,
                    rows,
                    total // seqs,
                    total,
                    f"{layer_cells} cells x {streams} streams",
                )
            )
        elif isinstance(first, StateLayer):
            if first.state_kind == "linear":
                raise LayoutNotApplicable(
                    "llama.cpp lightning/linear attention layout is not modelled; measure"
                )
            per_seq = layers.total(
                lambda x: (
                    (x.conv_elements() + x.ssm_elements()) * F32_BYTES
                    if isinstance(x, StateLayer)
                    else 0
                )
            )
            groups.append(
                GroupBytes(
                    kind, indices, 0, 0, per_seq, per_seq * max(1, seqs), "f32 recurrent state"
                )
            )
        elif kind == "mla":
            raise LayoutNotApplicable(
                "llama.cpp's MLA cache layout differs between versions; measure (llama_kv_cache log)"
            )
        else:
            groups.append(GroupBytes(kind, indices, 0, 0, 0, 0))
    name = k_type.name if v_type.name == k_type.name else f"K {k_type.name} / V {v_type.name}"
    notes = (
        f"-c {cells * streams} -np {seqs}{' -kvu' if unified else ''}: {cells} cells x {streams} streams",
    )
    stage = StageBytes(0, 0, spec.num_layers, tuple(groups))
    padding = ""
    if cells * streams != tokens * seqs:
        padding = f"context rounded to {cells} cells x {streams} streams for {tokens} tokens x {seqs} sequences"
    return LayoutResult(
        "llamacpp", name, tokens, seqs, tp, pp, dp, (stage,), notes=notes, padding=padding
    )
