"""Vision towers and projectors of VLM checkpoints in the weights (issue 29), counted by hand.

vLLM builds them in the wrapper's ``__init__`` (0.32.0 ``model_executor/models/gemma3_mm.py``,
``siglip.py``, ``mllama4.py``), so "Model loading took" includes them. The counts below are the
configs' sizes worked by hand from those module definitions; the transformers oracle is in
``tests/peer/test_plan_weights_peer.py``.
"""

from __future__ import annotations

from kvbudget.capacity.vision import vision_tower
from kvbudget.capacity.weights import compute_weights
from kvbudget.spec.resolve import resolve_model

# Gemma-3-27B's SigLIP tower (catalog vision_config): hidden 1152, intermediate 4304,
# 27 layers, patch 14, image 896 (64 x 64 = 4,096 positions), 3 channels.
#   per layer: qkv 1152 x 3456 + 3456 = 3,984,768; out 1152 x 1152 + 1152 = 1,328,256;
#   fc1 1152 x 4304 + 4304 = 4,962,512; fc2 4304 x 1152 + 1152 = 4,959,360;
#   2 LayerNorms 4 x 1152 = 4,608 -> 15,239,504; x 27 = 411,466,608
#   patch conv 3 x 14 x 14 x 1152 + 1152 = 678,528; positions 4,096 x 1152 = 4,718,592;
#   post_layernorm 2,304 -> tower 416,866,032
#   projector: 1152 x 5376 (text hidden) = 6,193,152 + RMSNorm 1152 = 6,194,304
GEMMA3_TOWER = 416_866_032
GEMMA3_PROJECTOR = 6_194_304

# Llama-4 Scout's tower: hidden 1408, intermediate 5632, 34 layers, patch 14, image 336
# (24 x 24 + 1 class = 577 positions).
#   per layer: q/k/v/o 4 x (1408 x 1408 + 1408) = 7,935,488; fc1 1408 x 5632 + 5632
#   = 7,935,488; fc2 5632 x 1408 + 1408 = 7,931,264; 2 LayerNorms 5,632 -> 23,807,872;
#   x 34 = 809,467,648
#   class 1,408 + positions 577 x 1408 = 812,416 + unfold linear 3 x 14 x 14 x 1408 = 827,904
#   + layernorm_pre/post 5,632 -> 1,647,360
#   adapter fc1 5632 x 4096 = 23,068,672 + fc2 4096 x 4096 = 16,777,216 (no bias);
#   projector 4096 x 5120 = 20,971,520
LLAMA4_VISION = 809_467_648 + 1_647_360 + 23_068_672 + 16_777_216 + 20_971_520


def test_gemma3_siglip_tower_and_projector_by_hand() -> None:
    spec = resolve_model("google/gemma-3-27b-it").spec
    assert spec is not None
    weights = compute_weights(spec)
    assert weights.vision_params == GEMMA3_TOWER + GEMMA3_PROJECTOR == 423_060_336
    # in the figure vLLM loads, 2 B each (bfloat16); the language model's count is unchanged
    without = compute_weights(spec.__class__(**{**_fields(spec), "wrapper_config": {}}))
    assert weights.per_rank_bytes[0] - without.per_rank_bytes[0] == 2 * 423_060_336
    assert weights.num_params == without.num_params


def test_llama4_scout_tower_by_hand() -> None:
    spec = resolve_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").spec
    assert spec is not None
    assert compute_weights(spec).vision_params == LLAMA4_VISION == 871_932_416


def test_tensor_parallel_splits_the_tower_linears() -> None:
    # TP 2 on Gemma-3's tower: column linears (qkv, fc1) halve weight and bias, row linears
    # (out, fc2) halve the weight and keep the bias; conv, positions, norms and the projector
    # parameter stay whole.
    #   per layer: qkv 1152 x 1728 + 1728 = 1,992,384; out 576 x 1152 + 1152 = 664,704;
    #   fc1 1152 x 2152 + 2152 = 2,481,256; fc2 2152 x 1152 + 1152 = 2,480,256; norms 4,608
    #   -> 7,623,208; x 27 = 205,826,616; + 678,528 + 4,718,592 + 2,304 + 6,194,304
    spec = resolve_model("google/gemma-3-27b-it").spec
    assert spec is not None
    tower = vision_tower(spec.wrapper_config, text_hidden=5376, tp=2)
    assert tower is not None
    assert tower.rank_params == 205_826_616 + 678_528 + 4_718_592 + 2_304 + 6_194_304
    assert tower.num_params == 423_060_336


def test_every_pipeline_stage_holds_the_tower() -> None:
    # vLLM builds the tower without a pipeline-rank check: each stage loads it
    spec = resolve_model("google/gemma-3-27b-it").spec
    assert spec is not None
    with_tower = compute_weights(spec, pp=2)
    without = compute_weights(spec.__class__(**{**_fields(spec), "wrapper_config": {}}), pp=2)
    for a, b in zip(with_tower.per_rank_bytes, without.per_rank_bytes, strict=True):
        assert a - b == 2 * 423_060_336


def test_text_models_and_unknown_towers_add_nothing() -> None:
    assert vision_tower({}, text_hidden=4096, tp=1) is None
    assert (
        vision_tower({"model_type": "x", "vision_config": {"model_type": "y"}}, text_hidden=1, tp=1)
        is None
    )


def _fields(spec: object) -> dict[str, object]:
    from dataclasses import fields

    return {f.name: getattr(spec, f.name) for f in fields(spec)}  # type: ignore[arg-type]


def test_qwen2_5_vl_top_level_vision_config_is_read(tmp_path: object) -> None:
    """Qwen2.5-VL's config.json keeps the text fields at the top beside ``vision_config``.

    Tower (depth 2, hidden 64, intermediate 96, patch 14, temporal 2, merge 2, out 128):
    conv 3 x 2 x 14 x 14 x 64 = 75,264; per block 2 RMSNorms 128 + qkv 64 x 192 + 192 = 12,480
    + proj 64 x 64 + 64 = 4,160 + gate_up 64 x 192 + 192 = 12,480 + down 96 x 64 + 64 = 6,208
    -> 35,456, x 2 = 70,912; merger ln_q 64 + 256 x 256 + 256 = 65,792 + 256 x 128 + 128
    = 32,896 -> 98,752; total 75,264 + 70,912 + 98,752 = 244,928.
    """
    import json
    from pathlib import Path

    config = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "vision_config": {
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_heads": 4,
            "in_chans": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 128,
        },
    }
    path = Path(str(tmp_path)) / "config.json"
    path.write_text(json.dumps(config), "utf-8")
    spec = resolve_model(str(path)).spec
    assert spec is not None
    assert compute_weights(spec).vision_params == 244_928
