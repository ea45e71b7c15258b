"""Issue #34: Dots3-Note (sliding MLA beside DSA MLA) and Qwen4-Exp (GDN + QSA, PLE states).

Expected bytes are transformers 5.24's own cache (``DynamicCache`` after one forward, every
floating tensor summed, as ``tests/peer/test_hf_oracle.py`` does), worked here by hand:

* Dots3-Note, transformers' tiny default (``tests/peer/tiny_configs.py``): 8 layers, indexed
  (DSA) on 0, 1, 5 and sliding on 2, 3, 4, 6, 7 (``Dots3NoteTextConfig.__post_init__``,
  ``configuration_dots3_note.py`` lines 307-312). An indexed layer keeps the latent
  ``[b, 1, T, 512]`` and rotary key ``[b, 1, T, 64]`` in bfloat16 and the indexer key
  ``[b, T, 128]`` in float32 (``modeling_dots3_note.py`` lines 746-752: the indexed layers'
  cos/sin come from ``inputs_embeds.float()``; the indexer's rotated key, lines 262-266, stays
  float32). A sliding layer keeps ``[b, 1, min(T, 127), 1024]`` and ``[b, 1, min(T, 127), 64]``
  (its ``per_layer_config``: SWA kv_lora_rank 1024, rope 256 - 192; window 128 - 1). The meta
  forward gave 761,856 B at T=48 and 2,100,608 B at T=144 (one sequence).
* Qwen4-Exp cannot run on the meta device (``META_FAIL`` says why); the tiny config below ran on
  the CPU in bfloat16 (one sequence). Its cache held, per linear layer, a conv state
  ``[1, 2*2*16 + 4*16 = 128, 4]`` bf16 and a recurrent state ``[1, 4, 16, 16]`` float32, on the
  PLE layers (ple_layer_ids 1 and 3: layers 0 and 2) also ``[1, 4*64 = 256, (4-1)*3 = 9]``
  bf16 (and the n-gram context as int64 token ids, not floats), and on the indexed layer K and V
  ``[1, 1, T, 32]`` plus the QSA key ``[1, T, 32]`` bf16: 16,320 / 19,200 B at T=5 / 20
  without PLE, 25,536 / 28,416 B with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.spec.layers import MLA
from kvbudget.spec.resolve import resolve_model
from kvbudget.spec.state_layers import StateLayer
from tests.unit.spec.config_file import spec_from_config

#: the tiny Dots3-Note text config transformers writes (to_dict of tiny_configs' variant;
#: per_layer_config lists only what differs from the global config)
SWA = {
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "kv_lora_rank": 1024,
    "head_dim": 256,
    "qk_nope_head_dim": 192,
}
DOTS3: dict[str, Any] = {
    "model_type": "dots3_note_text",
    "architectures": ["Dots3NoteForCausalLM"],
    "hidden_size": 256,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "kv_lora_rank": 512,
    "q_lora_rank": 1024,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "head_dim": 64,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "sliding_window": 128,
    "layer_types": ["indexed_attention"] * 2
    + ["sliding_attention"] * 3
    + ["indexed_attention"]
    + ["sliding_attention"] * 2,
    "per_layer_config": {str(i): SWA for i in (2, 3, 4, 6, 7)},
    "torch_dtype": "bfloat16",
}
INDEXED_PER_TOKEN = (512 + 64) * 2 + 128 * 4  # latent + rope in bf16, indexer key in float32
SLIDING_PER_TOKEN = (1024 + 64) * 2


@pytest.mark.parametrize(("tokens", "expected"), [(48, 761_856), (144, 2_100_608)])
def test_dots3_tiny_default_as_transformers_held_it(
    tmp_path: Path, tokens: int, expected: int
) -> None:
    spec = spec_from_config(tmp_path, DOTS3)
    by_hand = 3 * tokens * INDEXED_PER_TOKEN + 5 * min(tokens, 127) * SLIDING_PER_TOKEN
    assert by_hand == expected
    got = hf_layout(spec, tokens=tokens, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == expected
    two = hf_layout(spec, tokens=tokens, seqs=2, kv_dtype="bfloat16").total_bytes
    assert two == 2 * expected


def test_dots3_checkpoint_format_reads_as_transformers_normalises_it(tmp_path: Path) -> None:
    """A released checkpoint: no layer_types / per_layer_config / sliding_window, but
    ``sliding_window_size`` and ``swa_*`` keys (configuration_dots3_note.py lines 286-338): the
    same layers as the tiny default, so the same bytes."""
    raw = {
        k: v
        for k, v in DOTS3.items()
        if k not in ("layer_types", "per_layer_config", "sliding_window")
    }
    raw.update(sliding_window_size=128, swa_kv_lora_rank=1024, swa_qk_nope_head_dim=192)
    spec = spec_from_config(tmp_path, raw)
    layers = list(spec.layer_seq)
    assert [isinstance(x, MLA) and x.sliding_window == 128 for x in layers] == [
        False,
        False,
        True,
        True,
        True,
        False,
        True,
        True,
    ]
    got = hf_layout(spec, tokens=48, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == 761_856


def test_dots3_without_dsa_caches_no_indexer_key(tmp_path: Path) -> None:
    """``use_dsa: false``: the full layers are plain MLA (``full_attention``, no indexer)."""
    raw = {k: v for k, v in DOTS3.items() if k not in ("layer_types", "per_layer_config")}
    raw["use_dsa"] = False
    spec = spec_from_config(tmp_path, raw)
    got = hf_layout(spec, tokens=48, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == 3 * 48 * (512 + 64) * 2 + 5 * 48 * SLIDING_PER_TOKEN


def test_dots3_engine_layouts_refuse_in_one_line(tmp_path: Path) -> None:
    """transformers' dots3_note_text format: vLLM 0.32 and SGLang 0.5.23 read only the checkpoint's
    flat dots3_note (their pools: tests/unit/plan/test_plan_dots3_vllm.py,
    test_plan_sglang_dots3.py)."""
    spec = spec_from_config(tmp_path, DOTS3)
    with pytest.raises(LayoutNotApplicable, match=r"^model_type: 'dots3_note_text'.*line 94"):
        vllm_layout(spec, tokens=48, seqs=1)
    with pytest.raises(
        LayoutNotApplicable, match=r"^model_type: 'dots3_note_text'.*dots3.py line 18"
    ):
        sglang_layout(spec, tokens=48, seqs=1)


def _qwen4(**extra: Any) -> dict[str, Any]:
    return {
        "model_type": "qwen4_exp_text",
        "architectures": ["Qwen4ExpForCausalLM"],
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "linear_conv_kernel_dim": 4,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 32,
        "indexer_budget": 16,
        "indexer_compress_ratio": 4,
        "torch_dtype": "bfloat16",
        **extra,
    }


GDN_STATE = 128 * 4 * 2 + 4 * 16 * 16 * 4  # conv (bf16) + recurrent (float32)
PLE_STATE = 4 * 64 * 9 * 2  # hc_count x hidden channels x (kernel - 1) x ngram_size, bf16


@pytest.mark.parametrize(
    ("ple", "tokens", "expected"),
    [(False, 5, 16_320), (False, 20, 19_200), (True, 5, 25_536), (True, 20, 28_416)],
)
def test_qwen4_tiny_as_transformers_held_it_on_the_cpu(
    tmp_path: Path, ple: bool, tokens: int, expected: int
) -> None:
    extra = {"ple_layer_ids": [1, 3], "eos_token_id": 1} if ple else {}
    spec = spec_from_config(tmp_path, _qwen4(**extra))
    attention = tokens * (2 * 1 * 32 * 2 + 32 * 2)  # K + V + QSA key, bf16
    assert 3 * GDN_STATE + (2 * PLE_STATE if ple else 0) + attention == expected
    got = hf_layout(spec, tokens=tokens, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == expected
    states = [x for x in spec.layer_seq if isinstance(x, StateLayer)]
    assert [x.aux_conv_elements() for x in states] == ([256 * 9, 0, 256 * 9] if ple else [0] * 3)


def test_qwen4_layer_types_from_the_interval(tmp_path: Path) -> None:
    """No layer_types: indexed_attention on every 4th layer (full_attention_interval), and a
    checkpoint's ``full_attention`` entries are indexed (configuration_qwen4_exp.py 172-182)."""
    derived = spec_from_config(tmp_path, _qwen4())
    listed = spec_from_config(
        tmp_path, _qwen4(layer_types=["linear_attention"] * 3 + ["full_attention"])
    )
    for spec in (derived, listed):
        assert hf_layout(spec, tokens=5, seqs=1, kv_dtype="bfloat16").total_bytes == 16_320


def test_qwen4_without_qsa_fields_is_refused(tmp_path: Path) -> None:
    """transformers' default config has no indexer_* values and cannot build its indexer."""
    raw = _qwen4()
    raw["indexer_head_dim"] = None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.status == "not_applicable"
    assert "indexer_head_dim" in resolved.reason


def test_qwen4_vllm_layout_counts_its_qsa_keys(tmp_path: Path) -> None:
    """The vllm layout is vLLM 0.32's packed groups (worked by hand in
    tests/unit/plan/test_plan_qwen4_exp_vllm.py): one 32-token block of K/V (4,096 B) and
    compressed keys (512 B), the 256 B ring and 3 GDN pages padded to 4,096 B."""
    spec = spec_from_config(tmp_path, _qwen4())
    assert vllm_layout(spec, tokens=5, seqs=1).total_bytes == 4608 + 256 + 3 * 4096
