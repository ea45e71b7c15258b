"""llama.cpp's DeepSeek-V4 cache (``llama_kv_cache_dsv4``), worked by hand from llama.cpp
0c1e570 (llama-cpp-python 0.3.36 ``vendor/llama.cpp``), never from kvbudget:

* ``src/llama-model.cpp`` lines 2587-2628: ``kv_size = n_ctx_seq`` (``src/llama-context.cpp``
  lines 290-296: ``n_ctx = pad256(-c)``, ``n_ctx_seq = pad256(n_ctx / -np)``, or ``n_ctx`` with
  ``-kvu``), ``n_ubatch`` 512, ``swa_full`` off, ``n_rs_seq`` 0 (no speculative draft).
* ``src/llama-kv-cache-dsv4.cpp`` lines 1210-1336: one stream per sequence for every cache and
  state, even with ``-kvu``; K-only caches (``dsv4_make_k_only``, lines 883-887):

  - raw SWA cache on every layer (``src/models/deepseek4.cpp`` line 68 marks all sliding):
    ``pad256(min(kv_size, n_swa 128 + n_ubatch 512))`` cells (``src/llama-kv-cache-iswa.cpp``
    line 73), a row of ``head_dim`` 512;
  - CSA layers (ratio 4): ``pad256(ceil(kv_size / 4))`` cells of a 512 row, plus the indexer cache
    of the same cells with a 128 row;
  - HCA layers (ratio 128): ``pad256(ceil(kv_size / 128))`` cells of a 512 row;
  - f32 compressor states per layer and stream (lines 964-966, 1315-1329): CSA 2 x (2 x 512) x 8
    x 4 B = 65,536 plus indexer 2 x (2 x 128) x 8 x 4 B = 16,384 (81,920); HCA 2 x 512 x 128 x 4
    B = 524,288.

DeepSeek-V4-Flash (``compress_ratios``: 0, 0, then 4 and 128 alternating from layer 2 to 42): 43
layers in the raw cache, 21 CSA (2, 4, ..., 42), 20 HCA (3, 5, ..., 41). ggml rows: f16 2 B per
element (512 -> 1,024 B, 128 -> 256 B); q8_0 34 B per 32 elements (512 -> 544 B, 128 -> 136 B).
"""

from __future__ import annotations

import re

import pytest

from kvbudget.capacity.layouts.base import LayoutResult
from kvbudget.capacity.layouts.llamacpp import llamacpp_kv_split, llamacpp_layout
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

STATES = 21 * 81_920 + 20 * 524_288  # 12,206,080 B per stream


def _flash() -> ModelSpec:
    spec = resolve_model("deepseek-ai/DeepSeek-V4-Flash").spec
    assert spec is not None
    return spec


def _kinds(result: LayoutResult) -> dict[str, tuple[int, int, int]]:
    """kind -> (layers, cells per stream, bytes over all streams)."""
    stage = result.stages[0]
    return {g.kind: (g.num_layers, g.tokens_kept, g.bytes_total) for g in stage.groups}


def test_flash_f16_one_slot() -> None:
    """``-c 4096 -np 1``: kv_size 4,096; raw min(4,096, 640) -> 768 cells: 43 x 768 x 1,024 =
    33,816,576; CSA 1,024 cells: 21 x 1,024 x (1,024 + 256) = 27,525,120; HCA pad256(32) = 256
    cells: 20 x 256 x 1,024 = 5,242,880; states 12,206,080."""
    spec = _flash()
    result = llamacpp_layout(spec, tokens=4096, seqs=1, ctx_size=4096)
    assert _kinds(result) == {
        "sliding": (43, 768, 33_816_576),
        "compressed_sparse": (21, 1024, 27_525_120),
        "heavily_compressed": (20, 256, 5_242_880),
        "compressor_state": (41, 0, STATES),
    }
    assert result.total_bytes == 33_816_576 + 27_525_120 + 5_242_880 + STATES == 78_790_656
    kv = llamacpp_kv_split(spec, tokens=4096, seqs=1, ctx_size=4096)
    assert (kv.k_bytes, kv.v_bytes) == (33_816_576 + 27_525_120 + 5_242_880, 0)


def test_flash_q8_0_two_slots() -> None:
    """``-c 8192 -np 2 -ctk q8_0 -ctv q8_0``: n_ctx_seq 4,096 cells, 2 streams; raw 43 x 768 x
    544 x 2 = 35,930,112; CSA 21 x 1,024 x (544 + 136) x 2 = 29,245,440; HCA 20 x 256 x 544 x 2
    = 5,570,560; states 2 x 12,206,080 = 24,412,160."""
    spec = _flash()
    result = llamacpp_layout(spec, tokens=4096, seqs=2, kv_dtype="q8_0", ctx_size=8192)
    assert _kinds(result) == {
        "sliding": (43, 768, 35_930_112),
        "compressed_sparse": (21, 1024, 29_245_440),
        "heavily_compressed": (20, 256, 5_570_560),
        "compressor_state": (41, 0, 24_412_160),
    }
    assert result.total_bytes == 95_158_272
    assert result.stages[0].bytes_per_sequence_per_rank == 95_158_272 // 2


def test_flash_unified_still_one_stream_per_sequence() -> None:
    """``-c 8192 -np 2 -kvu``: n_ctx_seq = n_ctx = 8,192 cells, yet 2 streams (``unified_raw``
    and ``unified_compressed`` are false): raw 43 x 768 x 1,024 x 2 = 67,633,152; CSA
    pad256(2,048) = 2,048 cells: 21 x 2,048 x 1,280 x 2 = 110,100,480; HCA pad256(64) = 256:
    20 x 256 x 1,024 x 2 = 10,485,760; states 24,412,160."""
    result = llamacpp_layout(_flash(), tokens=4096, seqs=2, ctx_size=8192, unified=True)
    assert result.total_bytes == 67_633_152 + 110_100_480 + 10_485_760 + 24_412_160
    assert result.total_bytes == 212_631_552


def test_flash_short_context_pads_every_cache_to_256() -> None:
    """``-c 256``: raw pad256(min(256, 640)) = 256; CSA pad256(64) = 256; HCA pad256(2) = 256:
    43 x 256 x 1,024 + 21 x 256 x 1,280 + 20 x 256 x 1,024 + 12,206,080 = 35,602,432."""
    result = llamacpp_layout(_flash(), tokens=256, seqs=1, ctx_size=256)
    assert result.total_bytes == 11_272_192 + 6_881_280 + 5_242_880 + STATES == 35_602_432


def test_different_k_and_v_types_refused() -> None:
    """``src/llama-context.cpp`` lines 3835-3838 name ``LLM_ARCH_DEEPSEEK4`` beside MLA."""
    words = "model does not support different K (q8_0) and V (f16) cache types"
    with pytest.raises(ConfigError, match=re.escape(words)):
        llamacpp_layout(_flash(), tokens=256, seqs=1, kv_dtype="q8_0", v_dtype="f16")
