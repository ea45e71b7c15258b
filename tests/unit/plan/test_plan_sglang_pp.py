"""SGLang's own pipeline split (``distributed/utils.py`` ``get_pp_indices``), not vLLM's:
0.5.4 (lines 63-93) gives ``L // pp`` layers a stage and the whole remainder to the last; 0.5.23
(lines 110-150) gives one extra layer to each of the last ``L % pp`` stages. vLLM gives the
extras to the stages before the last. Expected splits worked by hand from those lines."""

from __future__ import annotations

from kvbudget.capacity.layouts.base import get_pp_indices, sglang_pp_split
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec


def test_split_by_version() -> None:
    # 10 layers over 4: base 2, remainder 2
    # 0.5.4: 2, 2, 2 and the last 10 - 6 = 4
    assert [sglang_pp_split((0, 5, 4))(10, r, 4) for r in range(4)] == [
        (0, 2),
        (2, 4),
        (4, 6),
        (6, 10),
    ]
    # 0.5.23: ranks >= 4 - 2 take 3: rank 2 starts 2 x 3 - 2 = 4, rank 3 at 3 x 3 - 2 = 7
    assert [sglang_pp_split((0, 5, 23))(10, r, 4) for r in range(4)] == [
        (0, 2),
        (2, 4),
        (4, 7),
        (7, 10),
    ]
    # vLLM: partitions [2, 2, 2, 2], +1 at [-2] and [-3] -> [2, 3, 3, 2]
    assert [get_pp_indices(10, r, 4) for r in range(4)] == [(0, 2), (2, 5), (5, 8), (8, 10)]
    # divisible: all three agree
    assert [sglang_pp_split((0, 5, 4))(8, r, 2) for r in range(2)] == [(0, 4), (4, 8)]


def _model() -> ModelSpec:
    return ModelSpec(
        model_id="test/ten-layers",
        architecture="LlamaForCausalLM",
        model_type="llama",
        layers=tuple(FullAttention(i, 8, 128) for i in range(10)),
        hidden_size=4096,
        num_attention_heads=32,
        vocab_size=32000,
        intermediate_size=14336,
        max_position_embeddings=8192,
        torch_dtype="bfloat16",
    )


def test_plan_stages_follow_sglangs_split() -> None:
    for version, layers in (("0.5.4", [2, 2, 2, 4]), ("0.5.23", [2, 2, 3, 3])):
        r = make_plan(
            PlanRequest(
                model="ten",
                gpu="H100",
                engine="sglang",
                engine_version=version,
                pp=4,
                max_model_len=4096,
            ),
            _model(),
        )
        assert [rank.num_layers for rank in r.ranks] == layers
        # the weights take the same split: stages 1 and 2 hold no embedding or head, so their
        # weights differ only by layer count (0.5.4: 2 and 2; 0.5.23: 2 and 3; vLLM's: 3 and 3)
        w = r.weights.per_rank_bytes
        assert (w[2] > w[1]) if version == "0.5.23" else (w[2] == w[1])


def test_calc_layout_takes_the_default_releases_split() -> None:
    # calc takes no version: the default release's (0.5.4) split, 2, 2, 2 and 4 layers
    from kvbudget.capacity.layouts.sglang import sglang_layout

    layout = sglang_layout(_model(), tokens=1024, seqs=1, kv_dtype="auto", tp=1, pp=4, dp=1)
    assert [(s.layer_start, s.layer_end) for s in layout.stages] == [
        (0, 2),
        (2, 4),
        (4, 6),
        (6, 10),
    ]
