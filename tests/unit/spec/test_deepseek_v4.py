"""Issue #34: DeepSeek-V4's compressed attention (``deepseek_v4``), hf layout.

What each layer keeps, from transformers 5.24's ``modeling_deepseek_v4.py``:

* ``sliding_attention``: a ``DynamicSlidingWindowLayer`` of one KV head of ``head_dim`` 512,
  K and V as two tensors, the last ``sliding_window - 1`` = 127 tokens;
* ``heavily_compressed_attention`` (``DeepseekV4HCACache``): the window's shared K=V head once
  (``self.values = self.keys``), one compressed entry of 512 per 128 tokens (``compressed_kv``),
  and the ``T % 128`` tokens not yet compressed with their gates (``buffer_kv``,
  ``buffer_gate``, 512 each);
* ``compressed_sparse_attention`` (``DeepseekV4CSACache``): the same window, one compressed entry
  per 4 tokens, buffers of two series (2 x 512) per token, and once a window has closed the last
  window's first series (``overlap_kv`` 4 x 512 in bf16, ``overlap_gate`` 4 x 512 in float32: the
  gate plus a float32 ``position_bias``); the indexer keeps the same four things at
  ``index_head_dim`` 128.

The expected bytes below are that arithmetic worked by hand; transformers' own cache on the meta
device gave the same numbers for the published configs (``tests/peer/test_calc_hf_peer.py``
re-measures them). hf layout, bfloat16 (2 B).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.capacity.layouts.llamacpp import llamacpp_layout
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.errors import SpecError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
PRO = "deepseek-ai/DeepSeek-V4-Pro"
B = 2  # bytes per bf16 element
F32 = 4
D, DI, W = 512, 128, 128  # head_dim, index_head_dim, sliding_window


def _spec(model_id: str) -> ModelSpec:
    resolved = resolve_model(model_id)
    assert resolved.status == "resolved", resolved.reason
    assert resolved.spec is not None
    return resolved.spec


def _hf(model_id: str, tokens: int, seqs: int = 1) -> int:
    return hf_layout(_spec(model_id), tokens=tokens, seqs=seqs, kv_dtype="bfloat16").total_bytes


def _kinds(model_id: str) -> list[str]:
    return [layer.kind for layer in _spec(model_id).layers]


def _write(tmp_path: Path, raw: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


def test_flash_layer_kinds_from_compress_ratios() -> None:
    """44 ratios for 43 layers: transformers keeps the first 43 (the last is the MTP layer's)."""
    raw = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8"))
    ratios = raw["compress_ratios"]
    assert len(ratios) == 44 and raw["num_hidden_layers"] == 43
    kinds = _kinds(FLASH)
    assert kinds.count("sliding") == ratios[:43].count(0) == 2
    assert kinds.count("compressed_sparse") == ratios[:43].count(4) == 21
    assert kinds.count("heavily_compressed") == ratios[:43].count(128) == 20


def test_flash_hf_at_100_tokens() -> None:
    """100 tokens: no HCA window has closed (all 100 buffered), 25 CSA windows have."""
    sliding = 2 * 100 * (D + D) * B  # K and V
    hca = 20 * (100 * D * B + 2 * 100 * D * B)  # window + buffer_kv/gate, no entry yet
    csa_main = 100 * D * B + 25 * D * B + 4 * D * (B + F32)  # window + entries + overlap
    csa_index = 25 * DI * B + 4 * DI * (B + F32)
    csa = 21 * (csa_main + csa_index)
    expected = sliding + hca + csa
    assert expected == 9_698_560  # transformers' cache on the meta device
    assert _hf(FLASH, 100) == expected
    assert _hf(FLASH, 100, seqs=2) == 2 * expected


def test_flash_hf_after_the_first_heavy_window_closes() -> None:
    """131 tokens: windows hold 127; HCA has 1 entry and 3 buffered tokens; CSA 32 entries and
    3 buffered tokens of two series (the bytes drop from 127 tokens: the HCA buffer drained)."""
    sliding = 2 * 127 * 2 * D * B
    hca = 20 * (127 * D * B + 1 * D * B + 2 * 3 * D * B)
    csa_main = 127 * D * B + 32 * D * B + 2 * 3 * 2 * D * B + 4 * D * (B + F32)
    csa_index = 32 * DI * B + 2 * 3 * 2 * DI * B + 4 * DI * (B + F32)
    expected = sliding + hca + 21 * (csa_main + csa_index)
    assert expected == 7_500_800  # transformers' cache on the meta device
    assert _hf(FLASH, 131) == expected


def test_pro_layers_and_bytes() -> None:
    """V4-Pro: ratios 128, 128, then 4 / 128 alternating; 62 entries for 61 layers."""
    kinds = _kinds(PRO)
    assert kinds.count("heavily_compressed") == 31 and kinds.count("compressed_sparse") == 30
    assert "sliding" not in kinds
    tokens = 300  # HCA: 2 entries, 44 buffered; CSA: 75 entries, none buffered
    hca = 31 * (127 * D * B + 2 * D * B + 2 * 44 * D * B)
    csa = 30 * (127 * D * B + 75 * (D + DI) * B + 4 * (D + DI) * (B + F32))
    assert _hf(PRO, tokens) == hca + csa == 14_130_688  # transformers: 14,130,688


def test_short_sequence_has_no_overlap_state() -> None:
    """3 tokens: no CSA window has closed, so no overlap tensors yet (update_overlap_state runs
    only when a window closes)."""
    spec = _spec(FLASH)
    got = hf_layout(spec, tokens=3, seqs=1, kv_dtype="bfloat16").total_bytes
    sliding = 2 * 3 * 2 * D * B
    hca = 20 * (3 * D * B + 2 * 3 * D * B)
    csa = 21 * (3 * D * B + 2 * 3 * 2 * D * B + 2 * 3 * 2 * DI * B)
    assert got == sliding + hca + csa == 583_680


def test_default_config_and_legacy_rates(tmp_path: Path) -> None:
    """No layer_types or compress_ratios: DeepseekV4Config's V4-Pro default (2 HCA, then CSA /
    HCA alternating); head_dim 512 and window 128 are class defaults; compress_rate_csa folds
    into compress_rates."""
    raw = {"model_type": "deepseek_v4", "num_hidden_layers": 6, "compress_rate_csa": 8}
    spec = _spec(_write(tmp_path, raw))
    assert [x.kind for x in spec.layers] == [
        "heavily_compressed",
        "heavily_compressed",
        "heavily_compressed",
        "compressed_sparse",
        "heavily_compressed",
        "compressed_sparse",
    ]
    rates = {getattr(x, "compress_rate", None) for x in spec.layers}
    assert rates == {128, 8}
    tokens = 9  # CSA at rate 8: 1 entry, 1 buffered token, overlap of 8
    hca = 4 * (9 * D * B + 2 * 9 * D * B)
    csa = 2 * (9 * D * B + (D + DI) * B + 2 * 1 * 2 * (D + DI) * B + 8 * (D + DI) * (B + F32))
    got = hf_layout(spec, tokens=tokens, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == hca + csa == 203_264  # transformers' cache on the meta device


def test_num_key_value_heads_is_one_whatever_the_config_says(tmp_path: Path) -> None:
    """DeepseekV4Attention projects one K=V head (kv_proj: hidden -> head_dim) and ignores
    num_key_value_heads (transformers' tiny test config sets 2; its cache holds one head)."""
    raw = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8"))
    raw["num_key_value_heads"] = 2
    spec = _spec(_write(tmp_path, raw))
    got = hf_layout(spec, tokens=100, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == _hf(FLASH, 100)
    assert {getattr(x, "num_kv_heads", 1) for x in spec.layers} == {1}


def test_unknown_compress_ratio_is_refused(tmp_path: Path) -> None:
    raw = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8"))
    raw["compress_ratios"][5] = 16
    with pytest.raises(SpecError, match="compress_ratios: expected a list of 0, 4 or 128"):
        resolve_model(_write(tmp_path, raw))


def test_engine_layouts_model_compressed_attention() -> None:
    """SGLang's DeepSeek-V4 pools (tests/unit/plan/test_plan_sglang_dsv4.py works them by hand:
    100 tokens take one 256-token page) and llama.cpp's llama_kv_cache_dsv4
    (tests/unit/plan/test_llamacpp_dsv4.py: -c 100 pads to 256 cells,
    43 x 256 x 1,024 + 21 x 256 x 1,280 + 20 x 256 x 1,024 + 12,206,080 f32 state bytes)."""
    spec = _spec(FLASH)
    assert sglang_layout(spec, tokens=100, seqs=1).total_bytes == 19_643_968
    assert llamacpp_layout(spec, tokens=100, seqs=1, ctx_size=100).total_bytes == 35_602_432


def test_vllm_layout_holds_vllm_packed_groups() -> None:
    """The vllm layout gives vLLM 0.32's packed groups (tests/unit/plan/test_plan_dsv4_vllm.py
    works their pages from vLLM's source): at 100 tokens a sequence holds 2 blocks of each
    64-token sliding group (window 128), 1 block of the 256-token MLA group, 2 blocks of the
    4-token compressor-state group (window 8: cdiv(100, 4) - 92 // 4) and 13 of the 8-token one
    (window 128: cdiv(100, 8))."""
    layout = vllm_layout(_spec(FLASH), tokens=100, seqs=1)
    assert layout.kv_dtype == "fp8_ds_mla"
    swa, mla, c4_states, c128_states = 37_440, 1_002_240, 870_912, 656_640
    assert layout.total_bytes == (
        2 * 22 * swa + 2 * 21 * swa + 1 * mla + 2 * c4_states + 13 * c128_states
    )


def test_plan_refuses_in_one_line_not_an_internal_error() -> None:
    """plan computes the weights first (approximated for V4's projections), then the vllm layout
    refuses a KV dtype vLLM refuses for DeepSeek-V4: one NotApplicableError line, never an
    InternalError."""
    from tests.unit.calc.helpers_calc import run_main

    code, out, err = run_main(
        [
            "plan",
            "--model",
            FLASH,
            "--gpu",
            "H200",
            "--max-model-len",
            "4096",
            "--kv-dtype",
            "bfloat16",
        ]
    )
    assert code != 0
    assert "InternalError" not in out + err
    assert "kv_dtype: 'bfloat16' for deepseek_v4" in out + err


@pytest.mark.parametrize(
    ("copy", "original"),
    [
        ("nvidia/DeepSeek-V4-Flash-NVFP4", FLASH),
        ("nvidia/DeepSeek-V4-Pro-NVFP4", PRO),
        ("sgl-project/DeepSeek-V4-Flash-FP8", FLASH),
        ("sgl-project/DeepSeek-V4-Pro-FP8", PRO),
    ],
)
def test_quantized_copies_keep_the_layout(copy: str, original: str) -> None:
    """NVFP4 experts (kv_cache_quant_algo null) and SGLang's FP8 copies cache what the originals
    do; SGLang's copies say model_type deepseek_ref, which transformers lacks: the same rules,
    unverified (a structural reference)."""
    spec = _spec(copy)
    assert [x.kind for x in spec.layers] == _kinds(original)
    assert _hf(copy, 100) == _hf(original, 100)
    assert spec.rules_verified is (not copy.startswith("sgl-project"))
