"""K / V projection weights split by each layer's own KV heads (vLLM 0.32), beyond MiMo-V2-Flash.

Gemma-4 (google/gemma-4-26B-A4B's config.json: hidden 2816; sliding layers 8 KV heads of
``head_dim`` 256, full layers ``num_global_key_value_heads`` 2 of ``global_head_dim`` 512; layer 5
is the first full layer): vLLM's ``Gemma4Attention`` takes the layer's own ``num_key_value_heads``
(``model_executor/models/gemma4.py`` lines 580-586) and builds one ``QKVParallelLinear`` per layer
with ``num_kv_heads = max(1, total_num_kv_heads // tp)`` (lines 388-393, 423-427); a full layer
with ``attention_k_eq_v`` loads its K weights into both the K and V slots (lines 90-118, 536), so
V is allocated too. Per rank at TP 2: sliding K and V 2816 x (4 x 256 = 1024), full K and V
2816 x (1 x 512 = 512); at TP 1 the whole 2048 / 1024 (before, every layer was whole at any TP).
"""

from __future__ import annotations

import pytest

from kvbudget.capacity.weight_matrices import layer_matrices
from kvbudget.spec.resolve import resolve_model

MODEL = "google/gemma-4-26B-A4B"
SLIDING, FULL = 0, 5


@pytest.mark.parametrize(
    ("tp", "sliding_cols", "full_cols"),
    [(1, 8 * 256, 2 * 512), (2, 4 * 256, 1 * 512), (4, 2 * 256, 1 * 512), (8, 1 * 256, 1 * 512)],
)
def test_gemma4_kv_projections_split_per_layer(tp: int, sliding_cols: int, full_cols: int) -> None:
    spec = resolve_model(MODEL).spec
    assert spec is not None
    for index, cols in ((SLIDING, sliding_cols), (FULL, full_cols)):
        mats, _ = layer_matrices(spec, index)
        shapes = {m.name: m.rank_shape(tp) for m in mats if m.name in ("k_proj", "v_proj")}
        assert shapes == {"k_proj": (2816, cols), "v_proj": (2816, cols)}, (index, tp)
