"""DeepSeek-V4 without a ratio-4 layer: nothing repeats, so vLLM 0.32 splits its sliding buckets.

``_get_packed_kv_cache_groups`` (``v1/core/kv_cache_utils.py`` lines 1860-1994): only a ratio-4
layer's indexer and compressor states (block 4, window 8, two page sizes, one of each per layer)
make a balanced bucket that mixes page sizes, so with compress ratios 0 and 128 only
``min_repeats_per_group`` is 0 and ``repeats_per_group`` None (lines 1903-1925). Then every
``SlidingWindowSpec`` bucket is a state bucket (lines 1938-1946; ``SlidingWindowMLASpec`` is one,
``v1/kv_cache_interface.py`` line 949) and splits into ``cdiv(n, max(anchor // page, 1))``
groups, ``anchor`` the widest group any bucket would give with each state bucket split to one
layer per group (lines 1948-1966).

Worked for 10 layers, ratios 0, 128 alternating (5 C128 layers), pages from
``test_plan_dsv4_vllm``: SWA bucket 10 x 37,440 (block 64); MLA bucket 5 x 1,728 (block 256,
not a state bucket, one group: 8,640); C128 compressor states 5 x 32,832 (block 8). anchor =
max(37,440, 8,640, 32,832) = 37,440; SWA: 37,440 // 37,440 = 1 state per block, 10 groups;
compressor: 37,440 // 32,832 = 1, 5 groups. vLLM 0.32's own code gave these 16 groups on the CPU
(``tests/integration/vllm/test_vllm_dsv4_groups.py``'s ``VLLM_SCRIPT`` on this config:
``[[64, 1, 37440]] * 10 + [[256, 5, 8640]] + [[8, 1, 32832]] * 5``, bytes per block 37,440).
"""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.capacity.pool_dsv4 import dsv4_groups
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.resolve import resolve_model
from tests.unit.plan.test_plan_dsv4_vllm import C128_PAGE, C128_STATE_PAGE, SWA_PAGE


def test_without_ratio_4_the_sliding_buckets_split_as_state_buckets(tmp_path: Path) -> None:
    config = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8"))
    config.update(num_hidden_layers=10, compress_ratios=[0, 128] * 5)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    spec = resolve_model(str(path)).spec
    assert spec is not None
    groups = dsv4_groups(spec)
    assert 37_440 // SWA_PAGE == 1 and 37_440 // C128_STATE_PAGE == 1
    assert [(g.block_size, len(g.layer_indices), g.page_size_bytes) for g in groups] == [
        *[(64, 1, SWA_PAGE)] * 10,
        (256, 5, 5 * C128_PAGE),  # 8,640
        *[(8, 1, C128_STATE_PAGE)] * 5,
    ]
    assert [list(g.layer_indices) for g in groups[11:]] == [[1], [3], [5], [7], [9]]
    assert max(g.page_size_bytes for g in groups) == 37_440
