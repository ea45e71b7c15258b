"""SGLang's pools for Inkling: a hybrid SWA token pool beside a conv-state ("mamba") pool.

Read from the sglang 0.5.23 wheel (paths under ``sglang/srt/``):

* Inkling is always hybrid SWA (``configs/model_config.py`` lines 2651-2700,
  ``is_hybrid_swa_model``: ``InklingForConditionalGeneration`` in ``hybrid_swa_archs``); its
  sliding layers are ``local_layer_ids``, the rest full (lines 2781-2797). The pool is
  ``HybridSWAPoolConfigurator`` (``model_executor/pool_configurator.py`` lines 1715-1725), which
  asserts at least one sliding layer (lines 667-670).
* Per token (lines 703-716): full ``get_num_kv_heads(tp) x (head_dim + v_head_dim) x kv_size``,
  sliding ``get_swa_num_kv_heads(tp) x (swa_head_dim + swa_v_head_dim) x kv_size``;
  ``cell = full x n_full + swa_full_tokens_ratio x swa x n_swa`` (lines 786-802);
  ``max_total_num_tokens = int(available // cell)`` (lines 907-916); full tokens that,
  page-aligned; sliding tokens ``int(full x ratio)`` page-aligned (lines 859-893); a sliding pool
  at or below ``sliding_window_size + page_size`` is refused (lines 197-216).
* The conv state (``configs/inkling.py`` lines 218-256): on every layer (``conv_layer_ids``, all
  of them) six conv states of ``sconv_kernel_size - 1`` rows: two of ``max(1, kv_heads // tp) x
  head_dim`` (full geometry), two of ``max(1, swa_kv_heads // tp) x swa_head_dim`` (sliding
  geometry), two of ``hidden_size`` (not split: ``--enable-scattered-sconv`` is off by default,
  ``arg_groups/fields/exec_.py`` lines 740-743), all bfloat16; no temporal state.
  ``mamba_cache_per_req`` sums them over the layers (``configs/mamba_utils.py`` lines 116-125).
* ``arg_groups/model_overrides/inkling.py`` lines 41-44: ``swa_full_tokens_ratio`` 0.1 and
  ``mamba_full_memory_ratio`` 0.1 unless given; lines 45-56: the ``extra_buffer`` mamba radix
  strategy, so a running request takes 3 + 2 state slots (``mem_cache/kv_cache_configurator.py``
  lines 227 and 3062-3088, ``mem_cache/allocation_sizing.py`` lines 11-19: 2 tracking slots with
  the default overlap schedule); lines 61-77: the fa4 attention backend on Hopper and Blackwell,
  which takes 128-token pages on SM100 (``arg_groups/overrides.py`` lines 1273-1297).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.layouts.base import LayoutNotApplicable, heads_per_rank
from kvbudget.capacity.layouts.sglang import SGLANG_CONV_STATE_BYTES, sglang_cell_bytes
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layers import ParallelHybrid, SlidingWindow
from kvbudget.spec.model import ModelSpec

#: kvbudget's state kind of Inkling's short convolutions
INKLING_STATE_KIND = "sconv_fp32"
#: ``arg_groups/model_overrides/inkling.py`` lines 41-42
INKLING_SWA_FULL_TOKENS_RATIO = 0.1
#: ``arg_groups/model_overrides/inkling.py`` lines 43-44
INKLING_MAMBA_FULL_MEMORY_RATIO = 0.1
#: ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` 3 (``kv_cache_configurator.py`` line 227) plus
#: ``get_mamba_tracking_slots(extra_buffer=True, overlap=True)`` 2 (``allocation_sizing.py``
#: lines 11-19), ``_calculate_mamba_ratio`` (``kv_cache_configurator.py`` lines 3062-3088)
INKLING_STATE_SLOTS_PER_REQUEST = 5
#: the fa4 page on SM100 (``arg_groups/overrides.py`` lines 1273-1297); 1 elsewhere
INKLING_SM100_PAGE_SIZE = 128
#: the Inkling model types SGLang reads (``configs/inkling.py`` lines 430-439: its text config)
SGLANG_INKLING_TYPES = frozenset({"inkling_model"})
#: the six conv states per layer (``configs/inkling.py`` lines 242-252)
INKLING_CONV_STATES = 6


def is_sglang_inkling(spec: ModelSpec) -> bool:
    """Inkling: attention beside short convolutions on every layer."""
    return any(
        isinstance(x, ParallelHybrid) and x.state.state_kind == INKLING_STATE_KIND
        for x in spec.layer_seq.distinct()
    )


@dataclass(frozen=True, slots=True)
class InklingGeometry:
    """What SGLang sizes Inkling's pools from: one full and one sliding layer, the hidden size,
    the conv kernel, and which layers are full / sliding."""

    full: ParallelHybrid
    sliding: ParallelHybrid
    hidden_size: int
    kernel: int
    full_layers: LayerIndices
    sliding_layers: LayerIndices
    sliding_window: int

    def state_bytes_per_layer(self, tp: int) -> int:
        """One layer's six bfloat16 conv states on one rank (``configs/inkling.py`` 218-256)."""
        full_dim = heads_per_rank(self.full.attention.num_kv_heads, tp) * self.full.head_dim
        swa_dim = heads_per_rank(self.sliding.attention.num_kv_heads, tp) * self.sliding.head_dim
        rows = self.kernel - 1
        return rows * (2 * full_dim + 2 * swa_dim + 2 * self.hidden_size) * SGLANG_CONV_STATE_BYTES

    def state_bytes_per_request(self, tp: int, num_layers: int) -> int:
        """``mamba_cache_per_req``: every layer keeps the conv states."""
        return self.state_bytes_per_layer(tp) * num_layers

    def cell_bytes(self, dtype: KvDtype, tp: int, start: int, end: int) -> tuple[int, int]:
        """``(full bytes per token, sliding bytes per token)`` of layers ``[start, end)``."""
        n_full = len(self.full_layers.split(start, end))
        n_swa = len(self.sliding_layers.split(start, end))
        full = sglang_cell_bytes(self.full.attention, dtype, tp) * n_full
        swa = sglang_cell_bytes(self.sliding.attention, dtype, tp) * n_swa
        return full, swa


def inkling_geometry(spec: ModelSpec) -> InklingGeometry:
    """Inkling's geometry as SGLang reads it; a model without a full or a sliding layer is
    refused in one line (SGLang asserts a sliding layer; an all-sliding Inkling is not planned)."""
    if spec.model_type not in SGLANG_INKLING_TYPES:
        raise LayoutNotApplicable(
            f"model_type: {spec.model_type!r}: SGLang 0.5.23 registers Inkling's configs as "
            "inkling_model / inkling_mm_model (configs/inkling.py lines 430-439) and serves "
            "InklingForConditionalGeneration (models/inkling.py line 1991), not transformers' "
            "inkling_text; use the inkling_model config (the same fields), or --engine hf"
        )
    runs = [(x, r) for x, r in spec.layer_runs() if isinstance(x, ParallelHybrid)]
    full = [(x, r) for x, r in runs if not isinstance(x.attention, SlidingWindow)]
    sliding = [(x, r) for x, r in runs if isinstance(x.attention, SlidingWindow)]
    if not sliding:
        raise LayoutNotApplicable(
            f"{spec.model_type}: no sliding layer (local_layer_ids empty): SGLang 0.5.23 serves "
            "Inkling with a hybrid SWA pool that asserts 'Hybrid SWA model must have at least one "
            "SWA layer' (model_executor/pool_configurator.py lines 667-670)"
        )
    if not full:
        raise LayoutNotApplicable(
            f"{spec.model_type}: every layer sliding: SGLang 0.5.23's all-SWA Inkling pool "
            "(model_executor/pool_configurator.py lines 788-795, 865-877) is not modelled"
        )
    first_full, first_swa = full[0][0], sliding[0][0]
    attention = first_full.attention
    hidden2 = first_full.state.intermediate_size - 2 * attention.num_kv_heads * attention.head_dim
    window = first_swa.attention
    assert isinstance(window, SlidingWindow)
    return InklingGeometry(
        full=first_full,
        sliding=first_swa,
        hidden_size=hidden2 // 2,
        kernel=first_full.state.conv_kernel,
        full_layers=LayerIndices(r for _, r in full),
        sliding_layers=LayerIndices(r for _, r in sliding),
        sliding_window=window.sliding_window,
    )


def inkling_max_total_tokens(rest_bytes: int, full_bytes: int, swa_bytes: int, ratio: float) -> int:
    """``HybridSWAPoolConfigurator.calculate_pool_sizes`` before alignment (pool_configurator.py
    lines 786-802, 907-916): ``int(rest // (full + ratio x swa))``."""
    cell = full_bytes + ratio * swa_bytes
    return int(max(0, rest_bytes) // cell) if cell else 0


def inkling_split(max_total: int, ratio: float, page_size: int) -> tuple[int, int]:
    """``_solve_pool_sizes`` (pool_configurator.py lines 859-893): ``(full tokens, sliding
    tokens)``, each floored to the page size."""
    full = max_total // page_size * page_size
    return full, int(full * ratio) // page_size * page_size
