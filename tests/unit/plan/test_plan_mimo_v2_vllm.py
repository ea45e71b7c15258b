"""MiMo-V2-Flash under ``plan --engine vllm`` at TP > 1, worked by hand from vLLM 0.32.0's source.

* ``MiMoV2Attention`` (``model_executor/models/mimo_v2.py`` lines 241-271): ``num_kv_heads =
  max(1, total_num_kv_heads // tp)`` with the layer's own heads: ``swa_num_key_value_heads`` 8 on
  the sliding layers, ``num_key_value_heads`` 4 on the full-attention layers (lines 380-418);
  ``QKVParallelLinear`` (``model_executor/layers/linear.py`` lines 1050-1063) gives each rank
  ``num_heads // tp`` Q heads and ``max(1, kv // tp)`` K / V heads (one replicated head when
  ``tp >= kv``); K is 192 wide, V 128 (``head_dim`` / ``v_head_dim``, ``swa_*`` alike).
* fp8 block quantization (``quantization/fp8.py`` lines 312-339, ``quantization/utils/
  fp8_utils.py`` lines 1412-1425): the e4m3 weight plus one fp32 scale per 128 x 128 block.
* The fp8 checkpoint ships ``k_proj`` with ``cdiv(8 x 192, 128) = 12`` scale rows per sliding
  layer; at TP 8 each rank loads ``cdiv(192, 128) = 2`` of them from ``shard x 2``
  (``linear.py`` lines 84-93, 1184-1193; ``model_executor/parameter.py`` lines 175-197): shard 6
  starts at row 12 of 12 and torch refuses (``start (12) + length (2) exceeds dimension size
  (12)``, the words SGLang's copy of this loader printed for MiMo-V2-Flash at TP 8,
  sgl-project/sglang#21102). At TP 4 two heads are 384 rows = 3 whole blocks: shards 0-3 take
  rows 0-11.
"""

from __future__ import annotations

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.weight_matrices import layer_matrices
from kvbudget.capacity.weights import layer_rank_bytes
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

MODEL = "XiaomiMiMo/MiMo-V2-Flash"
SLIDING, FULL = 1, 0  # hybrid_layer_pattern: layer 0 full attention, layer 1 sliding


def _spec() -> ModelSpec:
    spec = resolve_model(MODEL).spec
    assert spec is not None
    return spec


@pytest.mark.parametrize(
    ("tp", "swa_heads", "full_heads"),
    [(1, 8, 4), (2, 4, 2), (4, 2, 1), (8, 1, 1)],  # 8 // tp, max(1, 4 // tp)
)
def test_kv_projections_split_per_layer(tp: int, swa_heads: int, full_heads: int) -> None:
    spec = _spec()
    for index, heads in ((SLIDING, swa_heads), (FULL, full_heads)):
        mats, _ = layer_matrices(spec, index)
        shapes = {m.name: m.rank_shape(tp) for m in mats if m.name in ("k_proj", "v_proj")}
        assert shapes == {"k_proj": (4096, heads * 192), "v_proj": (4096, heads * 128)}


def test_sliding_attention_bytes_at_tp4() -> None:
    """Layer 1 at TP 4: q 4096 x 16 x 192 = 3072 rows (24 x 32 blocks), k 2 x 192 = 384 (3 x 32),
    v 2 x 128 = 256 (2 x 32), o_proj row-split 64 x 128 / 4 = 2048 inputs (32 x 16 blocks); fp32
    scales; plus the two bf16 norms (2 x 4096 x 2). Before, K / V were left whole (1536 / 1024
    rows) on every rank: the config has no single num_key_value_heads for the split to read."""
    spec = _spec()
    mats, _ = layer_matrices(spec, SLIDING)
    attention = [m for m in mats if m.name in ("q_proj", "k_proj", "v_proj", "o_proj")]
    want = (
        (4096 * 3072 + 4 * 24 * 32)
        + (4096 * 384 + 4 * 3 * 32)
        + (4096 * 256 + 4 * 2 * 32)
        + (2048 * 4096 + 4 * 16 * 32)
        + 2 * 4096 * 2
    )
    assert want == 23_615_104
    assert layer_rank_bytes(spec, attention, tp=4, moe_ranks=4) == want


def test_kv_pages_split_at_tp4() -> None:
    """Per rank at TP 4: a full layer keeps 1 head x (192 + 128) x 2 B = 640 B per token (block 32:
    20,480), a sliding layer 2 heads: 1,280 B (block 16: 20,480)."""
    request = PlanRequest(
        model=MODEL, engine="vllm", engine_version="0.32.0", gpu="H200", tp=4, max_model_len=65536
    )
    pages = {(g.kind, g.block_size, g.page_size_bytes) for g in make_plan(request).groups}
    assert pages == {("full", 32, 32 * 640), ("sliding", 16, 16 * 1280)}


@pytest.mark.parametrize("tp", [8, 16])
def test_fp8_checkpoint_at_tp8_refused_with_the_loaders_words(tp: int) -> None:
    request = PlanRequest(
        model=MODEL, engine="vllm", engine_version="0.32.0", gpu="H200", tp=tp, max_model_len=65536
    )
    with pytest.raises(LayoutNotApplicable) as info:
        make_plan(request)
    text = str(info.value)
    assert "start (12) + length (2) exceeds dimension size (12)" in text
    assert "\n" not in text
