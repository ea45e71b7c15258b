"""SGLang's pool for MiniMax-M3 (the published config, 60 layers): ``MiniMaxSparseKVPool``.

Expected numbers worked by hand from the sglang 0.5.23 wheel's source (``sglang/srt/``):

* ``model_executor/pool_configurator.py`` lines 410-490 (``_compute_cell_size``,
  ``is_minimax_sparse``): ``main_pool_bytes = (num_dense + num_sparse) x 2 x kv_heads x head_dim
  x dtype`` (every layer's K and V, ``kv_heads = get_num_kv_heads(attn_tp_size)``) plus
  ``indexer_bytes = (num_indexer_kv x 2 + num_indexer_k_only) x sparse_index_dim x index dtype``;
* ``configs/model_config.py`` lines 460-471: sparse layers are the non-zero
  ``sparse_attention_freq`` entries (57 of 60 here), K-only indexers the non-zero
  ``sparse_disable_index_value`` entries (all 57 here);
* ``mem_cache/memory_pool.py`` lines 5831-5844: the index keys are in the model dtype (bf16)
  with a 16-bit KV cache;
* ``arg_groups/model_overrides/minimax_m3.py`` lines 161-167 (SM100) and 181-187 (Hopper):
  ``page_size = 128`` when not given; ``max_total_num_tokens`` is floored to whole pages.

TP 1: 60 x 2 x 4 x 128 x 2 = 122,880 + 57 x 128 x 2 = 14,592 -> 137,472 B per token;
10 GiB = 10,737,418,240 B // 137,472 = 78,107 -> 610 pages of 128 = 78,080 tokens.
TP 8: one KV head per rank (max(1, 4 // 8)): 60 x 2 x 1 x 128 x 2 = 30,720 + 14,592 = 45,312;
10,737,418,240 // 45,312 = 236,966 -> 1,851 pages = 236,928 tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB

MODEL = "MiniMaxAI/MiniMax-M3"
KV_BYTES = 10 * GiB


def _plan(model: str = MODEL, **extra: Any) -> PlanResult:
    fields: dict[str, Any] = {
        "model": model,
        "engine": "sglang",
        "gpu": "H200",
        "kv_cache_memory_bytes": KV_BYTES,
        "max_model_len": 8192,
        **extra,
    }
    return make_plan(PlanRequest(**fields))


def test_published_config_counts() -> None:
    sparse = json.loads((MODELS_DIR / "MiniMaxAI--MiniMax-M3.json").read_text("utf-8"))[
        "sparse_attention_config"
    ]
    freq, k_only = sparse["sparse_attention_freq"], sparse["sparse_disable_index_value"]
    assert (len(freq), sum(1 for f in freq if f), sum(1 for f in k_only if f)) == (60, 57, 57)


@pytest.mark.parametrize(("tp", "cell", "tokens"), [(1, 137_472, 78_080), (8, 45_312, 236_928)])
def test_cell_and_pool_worked_by_hand(tp: int, cell: int, tokens: int) -> None:
    result = _plan(tp=tp)
    assert result.sglang is not None
    assert result.sglang.cell_size_bytes == cell
    assert result.sglang.page_size == 128
    assert result.sglang.max_total_num_tokens == KV_BYTES // cell // 128 * 128 == tokens
    assert "page_size" in result.defaults_applied


def test_given_page_size_is_kept() -> None:
    result = _plan(page_size=64)
    assert result.sglang is not None
    assert result.sglang.max_total_num_tokens == KV_BYTES // 137_472 // 64 * 64 == 78_080


def test_indexer_values_count_where_not_disabled(tmp_path: Path) -> None:
    """Without ``sparse_disable_index_value`` every sparse indexer stores K and V (lines 467-471:
    no flags, no K-only layer): 122,880 + 57 x 2 x 128 x 2 = 152,064 B per token at TP 1."""
    config = json.loads((MODELS_DIR / "MiniMaxAI--MiniMax-M3.json").read_text("utf-8"))
    del config["sparse_attention_config"]["sparse_disable_index_value"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    result = _plan(str(path))
    assert result.sglang is not None
    assert result.sglang.cell_size_bytes == 152_064


def test_calc_sglang_layout() -> None:
    """``calc --engine sglang``: 100 tokens take one 128-token page: 128 x 137,472 B."""
    spec = resolve_model(MODEL).spec
    assert spec is not None
    layout = sglang_layout(spec, tokens=100, seqs=1)
    assert layout.block_size == 128
    assert sum(g.bytes_total for s in layout.stages for g in s.groups) == 128 * 137_472


def test_an_8_bit_cache_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^kv_dtype: fp8\S* for MiniMax-M3 in SGLang") as info:
        _plan(kv_dtype="fp8_e4m3")
    assert "\n" not in str(info.value)
