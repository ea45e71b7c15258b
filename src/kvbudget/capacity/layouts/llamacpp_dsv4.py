"""llama.cpp's DeepSeek-V4 cache (``deepseek4``, ``llama_kv_cache_dsv4``).

Read in llama.cpp 0c1e570 (llama-cpp-python 0.3.36 ``vendor/llama.cpp``):

* ``src/llama-model.cpp`` lines 2587-2628: the main context builds ``llama_kv_cache_dsv4`` with
  ``kv_size = n_ctx_seq`` cells, ``n_seq_max``, ``n_ubatch``, ``swa_full`` and ``n_rs_seq``
  (0 unless a speculative draft needs rollback: ``common/common.h`` ``need_n_rs_seq``).
* ``src/llama-kv-cache-dsv4.cpp`` lines 1210-1336, the constructor; every cache and state keeps
  one stream per sequence even with ``-kvu`` (``unified_raw = false``, ``unified_compressed =
  false``), and ``dsv4_make_k_only`` (lines 883-887) makes each a K-only (MLA-style) cache
  (``src/llama-kv-cache.cpp`` lines 230-234), so ``-ctv`` sizes nothing:

  - raw: a ``llama_kv_cache_iswa`` over every layer; ``src/models/deepseek4.cpp`` line 68
    (``set_swa_pattern(0)``) marks every layer sliding, so all sit in its SWA cache of
    ``GGML_PAD(min(kv_size, n_swa + n_ubatch), 256)`` cells (``src/llama-kv-cache-iswa.cpp``
    line 73; ``kv_size`` with ``--swa-full``), a row of ``head_dim`` (``key_length``,
    ``head_count_kv`` 1: ``conversion/base.py`` lines 1453-1454, 1541-1543);
  - CSA (``compress_ratios[il] == 4``, line 18): ``GGML_PAD(max(1, ceil(kv_size / 4)), 256)``
    cells of a ``head_dim`` row, and the lightning indexer's cache of the same cells with an
    ``index_head_dim`` row (``n_head_kv`` 1, lines 1263-1269; filters lines 1271-1285);
  - HCA (``compress_ratios[il] == 128``, line 19): ``GGML_PAD(max(1, ceil(kv_size / 128)), 256)``
    cells of a ``head_dim`` row (``dsv4_comp_size``, lines 28-30);
  - compressor states (``llama_dsv4_comp_state``, lines 893-967): per layer two f32 tensors
    (kv, score) of ``n_embd_state x state_size x n_stream * (1 + n_rs_seq)``: CSA ``2 * head_dim
    x 8``, HCA ``head_dim x 128``, indexer ``2 * index_head_dim x 8`` (lines 1315-1329).
* ``conversion/deepseek.py`` lines 550-552: the default GGUF has ``num_hidden_layers`` blocks
  (the MTP layer only with ``--mtp``), so the raw cache covers the trunk layers.
* ``src/llama-context.cpp`` lines 3835-3838: ``-ctk`` must equal ``-ctv`` for ``deepseek4``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.layouts.base import GroupBytes, LayoutNotApplicable
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layer_kinds import has_compressed_attention
from kvbudget.spec.layers import CompressedAttention, CompressedSparseAttention, SlidingWindow
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

PAD = 256
#: ``DSV4_CSA_RATIO`` / ``DSV4_HCA_RATIO`` (``src/llama-kv-cache-dsv4.cpp`` lines 18-19)
CSA_RATIO = 4
HCA_RATIO = 128
F32_BYTES = 4


def is_llamacpp_dsv4(spec: ModelSpec) -> bool:
    """A model with DeepSeek-V4's compressed attention layers."""
    return has_compressed_attention(spec.layer_seq)


def _pad(value: int) -> int:
    return cdiv(value, PAD) * PAD


def comp_cells(kv_size: int, ratio: int) -> int:
    """``GGML_PAD(dsv4_comp_size(kv_size, ratio), 256)``: cells of a compressed cache."""
    return _pad(max(1, cdiv(kv_size, ratio)))


def dsv4_groups(
    spec: ModelSpec,
    k_type: KvDtype,
    *,
    kv_size: int,
    streams: int,
    n_ubatch: int = 512,
    swa_full: bool = False,
    n_rs_seq: int = 0,
) -> list[GroupBytes]:
    """The caches and states of ``llama_kv_cache_dsv4`` for ``kv_size`` cells per stream and
    ``streams`` streams (one per sequence), one group each."""
    raw_runs: list[range] = []
    csa: list[tuple[CompressedSparseAttention, range]] = []
    hca: list[tuple[CompressedAttention, range]] = []
    window = 0
    for x, r in spec.layer_seq.runs():
        if isinstance(x, CompressedSparseAttention) and x.compress_rate == CSA_RATIO:
            csa.append((x, r))
        elif isinstance(x, CompressedAttention) and not isinstance(x, CompressedSparseAttention):
            if x.compress_rate != HCA_RATIO:
                raise LayoutNotApplicable(_ratio_message(x.compress_rate))
            hca.append((x, r))
        elif isinstance(x, CompressedSparseAttention):
            raise LayoutNotApplicable(_ratio_message(x.compress_rate))
        elif not isinstance(x, SlidingWindow) or x.num_kv_heads != 1 or x.v_head_dim != 0:
            raise LayoutNotApplicable(
                f"deepseek4 layer {r.start} is {type(x).__name__}: llama.cpp 0c1e570's "
                "llama_kv_cache_dsv4 expects one K-only sliding head or a compressed layer"
            )
        raw_runs.append(r)
        window = max(window, x.sliding_window)
    head_dims = {x.head_dim for x, _ in spec.layer_seq.runs() if hasattr(x, "head_dim")}
    if len(head_dims) != 1:
        raise LayoutNotApplicable(f"deepseek4 layers of several head_dim {sorted(head_dims)}")
    (head_dim,) = head_dims
    raw_cells = kv_size if swa_full else _pad(min(kv_size, window + n_ubatch))
    row = k_type.row_bytes(head_dim)
    raw_layers = sum(len(r) for r in raw_runs)
    groups = [
        _cache("sliding", LayerIndices(raw_runs), raw_cells, streams, row * raw_layers, "raw SWA K")
    ]
    planes = streams * (1 + n_rs_seq)
    state_bytes = 0
    if csa:
        index_dim = csa[0][0].index_head_dim
        cells = comp_cells(kv_size, CSA_RATIO)
        per_cell = (row + k_type.row_bytes(index_dim)) * sum(len(r) for _, r in csa)
        indices = LayerIndices(r for _, r in csa)
        groups.append(
            _cache("compressed_sparse", indices, cells, streams, per_cell, "CSA K + indexer K")
        )
        per_layer = 2 * F32_BYTES * 8 * (2 * head_dim + 2 * index_dim)
        state_bytes += per_layer * len(indices)
    if hca:
        cells = comp_cells(kv_size, HCA_RATIO)
        indices = LayerIndices(r for _, r in hca)
        groups.append(
            _cache("heavily_compressed", indices, cells, streams, row * len(indices), "HCA K")
        )
        state_bytes += 2 * F32_BYTES * HCA_RATIO * head_dim * len(indices)
    if state_bytes:
        indices = LayerIndices([*(r for _, r in csa), *(r for _, r in hca)])
        groups.append(
            GroupBytes(
                "compressor_state",
                indices,
                0,
                0,
                state_bytes * (1 + n_rs_seq),
                state_bytes * planes,
                "f32 compressor states (kv + score), llama_dsv4_comp_state",
            )
        )
    return groups


def _cache(
    kind: str, indices: Sequence[int], cells: int, streams: int, per_cell: int, what: str
) -> GroupBytes:
    return GroupBytes(
        kind,
        indices,
        cells,
        per_cell,
        per_cell * cells,
        per_cell * cells * streams,
        f"{cells} cells x {streams} streams: {what} ({per_cell} B per cell, llama_kv_cache_dsv4)",
    )


def _ratio_message(ratio: int) -> str:
    return (
        f"deepseek4 compress ratio {ratio}: llama.cpp 0c1e570's llama_kv_cache_dsv4 caches only "
        f"ratios {CSA_RATIO} (CSA) and {HCA_RATIO} (HCA) (src/llama-kv-cache-dsv4.cpp lines "
        "18-19, 1271-1285)"
    )
