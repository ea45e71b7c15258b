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
  sequence. Lightning attention is not modelled, nor MLA outside DSA (the layout changes between
  versions).
* DeepSeek-V3.2 / GLM-5 (DSA): ``llama_kv_cache_dsa``, a K-only latent cache plus a K-only
  indexer-key cache of the same cells (``capacity.layouts.llamacpp_dsa`` cites the lines).
* DeepSeek-V4: ``llama_kv_cache_dsv4``, K-only raw SWA / CSA / HCA / indexer caches and f32
  compressor states, one stream per sequence even with ``-kvu``
  (``capacity.layouts.llamacpp_dsv4`` cites the lines).
* Falcon-H1: ``llama_model::create_memory`` (``src/llama-model.cpp``) builds a
  ``llama_memory_hybrid`` whose attention and recurrent filters both accept every layer, so each
  decoder layer has K/V cells and a recurrent state.
* One ``llama-server`` process: ``tp``/``pp`` are 1; ``dp`` counts servers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.layouts.base import (
    HF_HINT,
    GroupBytes,
    LayoutNotApplicable,
    LayoutResult,
    StageBytes,
    check_load,
    refuse_indexer,
    refuse_short_convs,
    refuse_sliding_latent,
)
from kvbudget.capacity.layouts.grouping import Members, group_by_kind
from kvbudget.capacity.layouts.llamacpp_dsa import (
    LLAMACPP_DOTS3_TYPES,
    dsa_cell_bytes,
    dsa_index,
    refuse_mixed_types,
)
from kvbudget.capacity.layouts.llamacpp_dsv4 import dsv4_groups, is_llamacpp_dsv4
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_kinds import has_indexer
from kvbudget.spec.layers import FullAttention, LayerSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer
from kvbudget.spec.traits import MINIMAX_M3_TYPES
from kvbudget.units import cdiv

PAD = 256
#: the llama.cpp source these refusals were read from: llama-cpp-python 0.3.36's vendored copy
#: (``vendor/llama.cpp``, the build ``scripts/llama-server.sh`` makes, VERSION commit 0c1e570)
LLAMACPP_SOURCE = "0c1e570 (llama-cpp-python 0.3.36)"
#: kvbudget's MiniMax-M3 text types (llama.cpp's LLM_ARCH_MINIMAX_M3, src/llama-arch.cpp line 140)
LLAMACPP_MSA_TYPES = MINIMAX_M3_TYPES
F32_BYTES = 4


def msa_index(spec: ModelSpec) -> tuple[int, int] | None:
    """MiniMax-M3 in llama.cpp: ``(first layer, index_head_dim)`` of ``llama_kv_cache_msa``'s
    indexer cache, None for a model without that cache.

    ``src/llama-model.cpp`` lines 2375-2395: ``llama_kv_cache_msa`` over every layer, its indexer
    cache on layers ``il >= n_layer_dense_lead``; ``src/llama-kv-cache-msa.cpp`` lines 38-49: that
    cache is a plain ``llama_kv_cache`` with ``n_head_kv = 1`` and ``n_embd_head_k =
    indexer_head_size``, so each of its layers holds a K row of ``index_head_dim`` (``-ctk``) AND a
    V row of the model's ``head_dim`` (``-ctv``; ``src/llama-kv-cache.cpp`` lines 209-234 allocate V
    for every non-MLA cache). ``n_layer_dense_lead`` is the leading zeros of ``moe_layer_freq``
    (``conversion/minimax.py`` lines 190-198, ``MiniMaxM3Model.set_gguf_parameters``, which also
    needs ``sparse_attention_config``). Checked against the real llama-server's log (its main and
    indexer ``llama_kv_cache: size`` lines) in
    ``tests/integration/llamacpp/test_llamacpp_msa_kv_log.py``."""
    if spec.model_type not in LLAMACPP_MSA_TYPES or not has_indexer(spec.layer_seq):
        return None
    raw = spec.raw_config
    freq = raw.get("moe_layer_freq")
    if not isinstance(raw.get("sparse_attention_config"), dict) or not isinstance(freq, list):
        raise LayoutNotApplicable(
            f"{spec.model_type}: llama.cpp {LLAMACPP_SOURCE}'s converter reads MiniMax-M3 from "
            "sparse_attention_config and moe_layer_freq (conversion/minimax.py lines 184-198), "
            f"which this config lacks; {HF_HINT}"
        )
    lead = 0
    while lead < len(freq) and freq[lead] == 0:
        lead += 1
    dim = max(getattr(x, "index_head_dim", 0) for x in spec.layer_seq.distinct())
    return lead, dim


def _msa_index_cell_bytes(
    layers: Members[LayerSpec], k_type: KvDtype, v_type: KvDtype, msa: tuple[int, int] | None
) -> tuple[int, int]:
    """(K, V) bytes one cell of these layers holds in ``llama_kv_cache_msa``'s indexer cache:
    layers ``>= index_from``, a K row of the model's ``index_head_dim`` (``indexer_head_size``)
    and a V row of the layer's ``v_dim`` (one head each), counted run by run."""
    if msa is None:
        return 0, 0
    index_from, index_dim = msa
    k = v = 0
    for x, indices in layers.runs:
        if not isinstance(x, FullAttention):
            continue
        count = max(0, indices.stop - max(indices.start, index_from))
        k += count * k_type.row_bytes(index_dim)
        v += count * v_type.row_bytes(x.v_dim)
    return k, v


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
    if is_llamacpp_dsv4(spec):  # K-only caches, a stream per sequence; states not included
        refuse_mixed_types(k_type, v_type)
        groups = dsv4_groups(spec, k_type, kv_size=cells, streams=seqs, n_ubatch=n_ubatch)
        k_bytes = sum(g.bytes_total for g in groups if g.tokens_kept)
        return LlamacppKV(cells * seqs, cells, seqs, k_type.name, v_type.name, k_bytes, 0)
    k_bytes = v_bytes = 0
    msa = msa_index(spec)
    dsa = dsa_index(spec)
    if dsa is not None:
        refuse_mixed_types(k_type, v_type)
    for (_, window), layers in group_by_kind(spec.layers):
        n = _layer_cells(cells, window, seqs, unified=unified, n_ubatch=n_ubatch) * streams
        if dsa is not None:  # K-only caches: -ctv sizes nothing
            k_bytes += n * sum(dsa_cell_bytes(layers, k_type, dsa))
        for x, indices in layers.runs:
            if isinstance(x, FullAttention):
                k_bytes += n * k_type.row_bytes(x.num_kv_heads * x.head_dim) * len(indices)
                v_bytes += n * v_type.row_bytes(x.num_kv_heads * x.v_dim) * len(indices)
        ik, iv = _msa_index_cell_bytes(layers, k_type, v_type, msa)
        k_bytes, v_bytes = k_bytes + n * ik, v_bytes + n * iv
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
    if spec.model_type not in LLAMACPP_DOTS3_TYPES:  # dots3_note: llama_kv_cache_dsa_iswa
        refuse_sliding_latent(
            spec,
            "llamacpp",
            f"llama.cpp {LLAMACPP_SOURCE} serves Dots3-Note (dots3note, src/llama-arch.cpp line "
            "115) from the checkpoint's flat config only (conversion/dots3.py lines 18-43), "
            "model_type dots3_note",
        )
    if tp != 1 or pp != 1:
        raise ConfigError(
            f"tp/pp: the llamacpp layout is one llama-server; got tp={tp} pp={pp}; use --dp",
            field="tp",
        )
    if is_llamacpp_dsv4(spec):
        return _dsv4_layout(spec, tokens, seqs, kv_dtype, v_dtype, ctx_size, unified, n_ubatch, dp)
    msa = msa_index(spec)
    dsa = dsa_index(spec)
    if msa is None and dsa is None:
        refuse_indexer(spec, "llamacpp")
    k_type = get_kv_dtype(kv_dtype, engine="llamacpp", model_dtype=spec.torch_dtype)
    v_type = get_kv_dtype(v_dtype or kv_dtype, engine="llamacpp", model_dtype=spec.torch_dtype)
    if dsa is not None:
        refuse_mixed_types(k_type, v_type)
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
            ) + sum(_msa_index_cell_bytes(layers, k_type, v_type, msa))
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
        elif kind == "mla" and dsa is not None:
            latent, keys = dsa_cell_bytes(layers, k_type, dsa)
            # Dots3-Note's sliding layers: llama_kv_cache_dsa_iswa's SWA cache (llamacpp_dsa)
            layer_cells = _layer_cells(cells, window, seqs, unified=unified, n_ubatch=n_ubatch)
            total = (latent + keys) * layer_cells * streams
            groups.append(
                GroupBytes(
                    kind,
                    indices,
                    layer_cells,
                    latent + keys,
                    total // seqs,
                    total,
                    f"{layer_cells} cells x {streams} streams: K-only latent ({latent} B) + "
                    f"indexer key ({keys} B) per cell (llama_kv_cache_dsa"
                    f"{'_iswa SWA cache' if window else ''})",
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


def _dsv4_layout(
    spec: ModelSpec,
    tokens: int,
    seqs: int,
    kv_dtype: str,
    v_dtype: str | None,
    ctx_size: int | None,
    unified: bool,
    n_ubatch: int,
    dp: int,
) -> LayoutResult:
    """DeepSeek-V4's ``llama_kv_cache_dsv4``: ``n_ctx_seq`` cells (``n_ctx`` with ``-kvu``) in
    one stream per sequence (``capacity.layouts.llamacpp_dsv4``)."""
    k_type = get_kv_dtype(kv_dtype, engine="llamacpp", model_dtype=spec.torch_dtype)
    v_type = get_kv_dtype(v_dtype or kv_dtype, engine="llamacpp", model_dtype=spec.torch_dtype)
    refuse_mixed_types(k_type, v_type)
    cells, _ = llamacpp_cells(tokens, seqs, ctx_size=ctx_size, unified=unified)
    if cells < tokens:
        raise ConfigError(
            f"ctx_size: {ctx_size} gives {cells} cells per slot, fewer than tokens={tokens}; "
            f"raise -c to at least {tokens * seqs}",
            field="ctx_size",
        )
    groups = dsv4_groups(spec, k_type, kv_size=cells, streams=seqs, n_ubatch=n_ubatch)
    flags = f"-c {ctx_size or tokens * seqs} -np {seqs}{' -kvu' if unified else ''}"
    notes = (
        f"{flags}: llama_kv_cache_dsv4 keeps {cells} cells per sequence in {seqs} streams "
        "(one per sequence even with -kvu); --swa-full off, no speculative rollback states",
    )
    stage = StageBytes(0, 0, spec.num_layers, tuple(groups))
    return LayoutResult("llamacpp", k_type.name, tokens, seqs, 1, 1, dp, (stage,), notes=notes)
