"""Qwen4-Exp's target weights under ``plan --engine vllm``: every parameter and persistent buffer
vLLM 0.32.0 builds on one GPU, worked by hand from its source (``site-packages/vllm/``, lines as
cited; the code under test is ``kvbudget.capacity.weights_qwen4``, never called here), and
checked against vLLM's own constructors (``scripts/check_vllm_qwen4_exp_weights.py``: the model
built on the meta device in gloo processes of 1 and 2 CPU ranks, with the PLE tables on the
device; it printed 1,068,648 B at TP 1 and 631,364 B on each rank at TP 2, the totals below).

The model: hidden 64, 4 layers (3 gated delta net, the 4th QSA), 2 heads of 32 and 1 KV head,
``partial_rotary_factor`` 0.25, max positions 256, GDN 2 key / 4 value heads of 16, conv 4;
indexer 2 + 1 heads of 32, budget 16, ratio 4; 8 experts of 32 rows, shared expert 48; ``hc_count``
4, ``hc_lowrank`` 8; PLE on layers [1, 3] (0-indexed 0 and 2), ``ple_embed_dim`` 32, n-gram 3 x 2
heads per n-gram = 4 heads of 8 columns, ``ngram_vocab_size_base`` 100, divisor 128; vocab 1,000;
bfloat16 (2 B); ``max_num_batched_tokens`` 64. Per rank at TP 1 / TP 2:

* hyper-connection (``models/qwen4_exp/nvidia/hyperconnection.py`` lines 69-131, bfloat16, never
  split): ``hc_norm`` 256 x 2 = 512; ``input_mix_weight_down_block_inject`` 256 x (8 + 4 + pad 4)
  x 2 = 8,192; ``input_mix_weight_up`` 8 x 256 x 2 = 4,096: 12,800, two per layer: 25,600. The
  final mixer (no combine): 512 + 4,096 + 4,096 = 8,704.
* GDN (``model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py`` lines 501-590): conv1d 4 x 128
  x 2 = 1,024 / 512; in_proj_qkvz 64 x 192 x 2 = 24,576 / 12,288; in_proj_ba 64 x 8 x 2 = 1,024
  / 512; dt_bias 8 / 4; fp32 A_log 16 / 8; norm 16 x 2 = 32; out_proj 64 x 64 x 2 = 8,192 /
  4,096: 34,872 / 17,452.
* MoE (``model_executor/models/qwen3_next.py`` lines 131-247): gate 64 x 8 x 2 = 1,024;
  shared_expert_gate 128; shared expert 3 x 64 x 48 x 2 = 18,432 / 9,216; experts 8 x 3 x 32 x
  64 x 2 = 98,304 / 49,152: 117,888 / 59,520.
* QSA (``nvidia/qsa.py`` lines 410-521, ``nvidia/indexer_qsa.py`` lines 132-150): the packed
  qkv_proj 64 x (2 x 2 x 32 / tp + 32 + 32 + 3 x 32) x 2 = 64 x 288 x 2 = 36,864 / 64 x 224 x 2
  = 28,672 (the one KV head replicated); o_proj 8,192 / 4,096; q/k and indexer norms 4 x 32 x 2
  = 256; four fp32 KV scales 16; int32 topk_indices_buffer 64 x (16 + 4) x 4 = 5,120: 50,448 /
  38,160.
* PLE (``nvidia/ple_layer.py`` lines 65-138, ``nvidia/ngram_embedding.py`` lines 141-241): head
  g of dense PLE layer j holds the (4j + g + 1)-th prime above 99: 101 + 103 + 107 + 109 = 420
  rows (layer 0), 113 + 127 + 131 + 137 = 508 (layer 2), each padded to 512, split over TP:
  512 / 256 x 8 x 2 = 8,192 / 4,096 on the device; in vLLM's default (``config/engram.py`` line
  37: ``cpu_offload`` True) the table is in pinned host memory and the GPU holds int64
  ``_prefetch_ids`` 64 x 4 x 8 = 2,048 instead; int64 buffers (3 + 4 + 4) x 8 = 88; kv_proj 32 x
  320 x 2 = 20,480; three norms 3 x 256 x 2 = 1,536; conv1d 256 x 4 x 2 = 2,048: 26,200 on the
  host-table default (32,344 / 28,248 with the table on the device).
* per stage (``nvidia/model.py`` lines 436, 460-475, 737-741): embed_tokens and lm_head 1,024 /
  512 rows x 64 x 2 each = 262,144 / 131,072; the mixer 8,704; rotary cache 256 x 8 x 2 = 4,096
  (``rotary_embedding/__init__.py`` lines 63-72).

TP 1, tables on the device: 4 x (25,600 + 117,888) + 3 x 34,872 + 50,448 + 2 x 32,344 + 8,704 +
262,144 + 4,096 = 1,068,648 (what vLLM built). TP 2: 4 x (25,600 + 59,520) + 3 x 17,452 + 38,160
+ 2 x 28,248 + 8,704 + 131,072 + 4,096 = 631,364. vLLM's default moves each table off the GPU
and adds ``_prefetch_ids``: TP 1 1,068,648 - 2 x (8,192 - 2,048) = 1,056,360; TP 2 631,364 - 2 x
(4,096 - 2,048) = 627,268.

Before this module the generic count priced the tiny model as a dense transformer without the
hyper-connections, the output gate, the indexer, the PLE layers or the buffers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.units import GiB
from tests.unit.spec.test_dots3_qwen4 import _qwen4

#: the tiny Qwen4-Exp of scripts/check_vllm_qwen4_exp_weights.py: the spec tests' config plus
#: the fields the weights read
CONFIG: dict[str, Any] = {
    **_qwen4(),
    "output_gate_type": "silu",
    "vocab_size": 1000,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 48,
    "hc_count": 4,
    "hc_lowrank": 8,
    "ple_layer_ids": [1, 3],
    "ple_embed_dim": 32,
    "ngram_size": 3,
    "heads_per_ngram": 2,
    "ngram_vocab_size_base": 100,
    "make_ngram_vocab_size_divisible_by": 128,
    "eos_token_id": 1,
    "max_position_embeddings": 256,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.25,
    },
}
HC = 2 * (256 + 256 * 16 + 8 * 256) * 2  # two GatedResidual per layer: 25,600
MIXER = (256 + 256 * 8 + 8 * 256) * 2  # 8,704
GDN = {1: 1024 + 24576 + 1024 + 8 + 16 + 32 + 8192, 2: 512 + 12288 + 512 + 4 + 8 + 32 + 4096}
MOE = {1: 1024 + 128 + 18432 + 98304, 2: 1024 + 128 + 9216 + 49152}
QSA = {1: 36864 + 8192 + 256 + 16 + 5120, 2: 28672 + 4096 + 256 + 16 + 5120}
PLE_REST = 88 + 20480 + 1536 + 2048  # buffers, kv_proj, norms, conv1d
TABLE = {1: 512 * 8 * 2, 2: 256 * 8 * 2}
PREFETCH = 64 * 4 * 8  # int64 _prefetch_ids
EMBED = {1: 2 * 1024 * 64 * 2, 2: 2 * 512 * 64 * 2}
ROPE = 256 * 8 * 2
#: what vLLM 0.32's constructors built (scripts/check_vllm_qwen4_exp_weights.py, tables on GPU)
VLLM_BUILT = {1: 1_068_648, 2: 631_364}


def _by_hand(tp: int, *, table: bool) -> int:
    ple = (TABLE[tp] if table else PREFETCH) + PLE_REST
    layers = 4 * (HC + MOE[tp]) + 3 * GDN[tp] + QSA[tp] + 2 * ple
    return layers + MIXER + EMBED[tp] + ROPE


def _config(tmp_path: Path, **changes: Any) -> str:
    folder = tmp_path / "qwen4"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**CONFIG, **changes}))
    return str(folder)


def _weights(model: str, tp: int, **extra: Any) -> Any:
    request = PlanRequest(
        model=model,
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        tp=tp,
        max_model_len=256,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        **extra,
    )
    return make_plan(request).weights


def test_hand_arithmetic_is_what_vllm_built() -> None:
    """The hand sums with the tables on the device are vLLM's own totals."""
    assert _by_hand(1, table=True) == VLLM_BUILT[1] == 1_068_648
    assert _by_hand(2, table=True) == VLLM_BUILT[2] == 631_364


@pytest.mark.parametrize(("tp", "expected"), [(1, 1_056_360), (2, 627_268)])
def test_target_per_rank_as_vllm_builds_it(tmp_path: Path, tp: int, expected: int) -> None:
    """vLLM's default: the PLE tables on the host, ``_prefetch_ids`` on the GPU."""
    assert _by_hand(tp, table=False) == expected
    weights = _weights(_config(tmp_path), tp)
    assert weights.source == "computed"
    assert weights.per_rank_bytes == (expected,)
    assert not any("approximated" in note or "q/k norms" in note for note in weights.notes)


#: what vLLM 0.32 built for Qwen4ExpMTP, without embed_tokens, lm_head and the rotary cache
#: (the target's once the proposer loads it): scripts/check_vllm_qwen4_exp_weights.py
VLLM_DRAFTER_BUILT = {1: 485_904 - 266_240, 2: 275_984 - 135_168}


@pytest.mark.parametrize(("tp", "expected"), [(1, 1_308_792), (2, 800_852)])
def test_mtp_drafter_joins_the_last_stage(tmp_path: Path, tp: int, expected: int) -> None:
    """The drafter (``models/qwen4_exp/nvidia/mtp.py`` lines 172-259): ``fc_embedding`` and
    ``fc_hidden`` 64 x 64 / tp x 2 each = 16,384 / 8,192; one QSA decoder layer: two
    hyper-connections 25,600, the QSA 50,448 / 38,160 (its own top-k buffer included), the MoE
    117,888 / 59,520; ``pre_fc_norm_embedding`` 128 and ``pre_fc_norm_hidden`` 512; the mixer
    8,704: 219,664 / 140,816, what vLLM built. With it the target keeps ``_mtp_hidden_buffer``
    64 x 4 x 64 x 2 = 32,768 (``nvidia/model.py`` lines 480-495): 1,056,360 + 219,664 + 32,768 =
    1,308,792; 627,268 + 140,816 + 32,768 = 800,852. No --weights-bytes needed."""
    drafter = {
        1: 16384 + HC + QSA[1] + MOE[1] + 640 + MIXER,
        2: 8192 + HC + QSA[2] + MOE[2] + 640 + MIXER,
    }
    assert drafter == VLLM_DRAFTER_BUILT == {1: 219_664, 2: 140_816}
    assert _by_hand(tp, table=False) + drafter[tp] + 64 * 4 * 64 * 2 == expected
    config = _config(tmp_path, mtp_num_hidden_layers=1)
    spec = '{"method": "mtp", "num_speculative_tokens": 1}'
    weights = _weights(config, tp, speculative_config=spec)
    assert weights.per_rank_bytes == (expected,)


def test_engine_log_figure_kept(tmp_path: Path) -> None:
    weights = _weights(_config(tmp_path), 1, weights_bytes=GiB)
    assert weights.source == "flag"
    assert weights.per_rank_bytes == (GiB,)


def test_quantized_checkpoint_keeps_the_generic_count_with_a_note(tmp_path: Path) -> None:
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    weights = _weights(_config(tmp_path, quantization_config=quant), 1)
    assert any("generic count" in note for note in weights.notes)


def test_snapshot_split_by_vllms_shares_tables_off(tmp_path: Path) -> None:
    """A snapshot's total_size is split by the shares of the parameters with the PLE tables (the
    checkpoint holds them), buffers off; the GPU then gives the tables back and keeps its
    buffers. TP 1: buffers 5,120 (top-k) + 16 (KV scales) + 2 x 88 (n-gram layouts) + 4,096
    (rotary) = 9,408; the parameters 1,068,648 - 9,408 = 1,059,240 (the whole); with
    total_size 2 x 1,059,240: 2 x 1,059,240 + 9,408 - (2 x 8,192 - 2 x 2,048) = 2,115,600."""
    folder = Path(_config(tmp_path))
    index = {"metadata": {"total_size": 2 * 1_059_240}, "weight_map": {}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    weights = _weights(str(folder), 1)
    assert weights.source == "read"
    assert weights.total_bytes == 2 * 1_059_240
    assert weights.per_rank_bytes == (2_115_600,)


def test_pipeline_stages_each_hold_embedding_and_head(tmp_path: Path) -> None:
    """Without ``ple_layer_ids`` (vLLM refuses PLE under pipeline parallel), ``--pp 2``: layers
    [0, 2) and [2, 4) (``get_pp_indices``); ``embed_tokens`` and ``lm_head`` are built on every
    stage (``nvidia/model.py`` lines 436, 737-741: neither is a ``PPMissingLayer``), the mixer
    and the rotary cache on the last (its QSA layer). Stage 0: 2 x (25,600 + 117,888 + 34,872) +
    262,144 = 618,864; stage 1: 25,600 + 117,888 + 34,872 + 25,600 + 117,888 + 50,448 + 262,144
    + 8,704 + 4,096 = 647,240: what vLLM built on two CPU pipeline ranks
    (``scripts/check_vllm_qwen4_exp_weights.py``, ``target-pp``)."""
    stage0 = 2 * (HC + MOE[1] + GDN[1]) + EMBED[1]
    stage1 = 2 * HC + 2 * MOE[1] + GDN[1] + QSA[1] + EMBED[1] + MIXER + ROPE
    assert (stage0, stage1) == (618_864, 647_240)
    config = _config(tmp_path, ple_layer_ids=[])
    weights = _weights(config, 1, pp=2, kv_cache_memory_bytes=GiB)
    assert weights.per_rank_bytes == (stage0, stage1)
