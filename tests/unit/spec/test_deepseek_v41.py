"""DeepSeek-V4.1 (``deepseek_v41``): each layer's kind, from vLLM 0.32.0's reading.

There is no published DeepSeek-V4.1 config and no transformers class, so the config below is a
small test config built from the fields vLLM 0.32's ``DeepseekV41Config`` (``transformers_utils/
configs/deepseek_v41.py`` lines 8-50: ``text_config`` keys copied onto the top level) and the
attention read (``models/deepseek_v41/attention.py`` lines 291-351: ``head_dim``,
``qk_rope_head_dim``, ``sliding_window``, ``compress_ratios``, ``kv_source_layer_ids``,
``index_source_layer_ids``, ``index_head_dim``). Expected kinds, by those lines:

* layer 0: ratio 0, a pure sliding window;
* layer 1: ratio 1, a kv source and an index source: compressed cache at ratio 1 plus the
  indexer keys (CSA-like);
* layer 2: ratio 1, no kv source: reads layer 1's compressed cache (``max(s <= 2) = 1``) and its
  indexer (an index source sharing layer 1's key cache): its own window only;
* layer 3: ratio 2, kv and index source; layer 4: ratio 2, reads layer 3; layer 5: ratio 2, a
  kv source only (no indexer keys).

The seventh ``compress_ratios`` entry belongs to the MTP layer (``attention.py`` lines 304-315).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.errors import SpecError
from kvbudget.spec.layers import CompressedAttention, CompressedSparseAttention, SlidingWindow
from kvbudget.spec.resolve import resolve_model
from tests.unit.config_files import write_config

DSV41_TEXT: dict[str, Any] = {
    "num_hidden_layers": 6,
    "hidden_size": 4096,
    "num_attention_heads": 64,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "sliding_window": 128,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "compress_ratios": [0, 1, 1, 2, 2, 2, 0],
    "kv_source_layer_ids": [1, 3, 5],
    "index_source_layer_ids": [1, 2, 3],
    "engram_layer_ids": [2],
    "max_position_embeddings": 65536,
    "vocab_size": 129280,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}
#: vLLM 0.32's flat form (DeepseekV41Config.__init__ copies text_config onto the top level)
DSV41_FLAT: dict[str, Any] = {
    "architectures": ["DeepseekV41ForCausalLM"],
    "model_type": "deepseek_v41",
    **DSV41_TEXT,
}


def _nested(text: dict[str, Any]) -> dict[str, Any]:
    return {
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "text_config": {**text, "model_type": "deepseek_v41_text"},
        "vision_config": {"num_hidden_layers": 2, "hidden_size": 1024},
    }


def _resolve(tmp_path: Path, nested: bool, **changes: Any) -> Any:
    if nested:
        text = {k: v for k, v in {**DSV41_TEXT, **changes}.items() if v is not None}
        path = tmp_path / "config.json"
        path.write_text(json.dumps(_nested(text)), encoding="utf-8")
        return resolve_model(str(path))
    return resolve_model(write_config(tmp_path, DSV41_FLAT, **changes))


@pytest.mark.parametrize("nested", [True, False])
def test_layers_from_the_kv_and_index_sources(tmp_path: Path, nested: bool) -> None:
    resolved = _resolve(tmp_path, nested)
    assert resolved.status == "resolved", resolved.reason
    spec = resolved.spec
    assert spec.model_type == ("deepseek_v41_text" if nested else "deepseek_v41")
    assert spec.rules_verified is False  # no transformers class: a structural reference
    assert spec.layers == [
        SlidingWindow(0, 1, 512, 0, 128),
        CompressedSparseAttention(1, 512, 128, 1, index_head_dim=128),
        SlidingWindow(2, 1, 512, 0, 128),
        CompressedSparseAttention(3, 512, 128, 2, index_head_dim=128),
        SlidingWindow(4, 1, 512, 0, 128),
        CompressedAttention(5, 512, 128, 2),
    ]


def test_without_compress_ratios_every_layer_slides(tmp_path: Path) -> None:
    """``getattr(config, "compress_ratios", None)`` None: ratio 0 everywhere (lines 310-315)."""
    resolved = _resolve(
        tmp_path, False, compress_ratios=None, kv_source_layer_ids=None, index_source_layer_ids=None
    )
    assert resolved.status == "resolved", resolved.reason
    assert {x.kind for x in resolved.spec.layers} == {"sliding"}


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (
            {"compress_ratios": [0, 4, 1, 2, 2, 2]},
            "compress_ratios",
            "only 0 (sliding window), 1 and 2",
        ),
        ({"kv_source_layer_ids": []}, "kv_source_layer_ids", "requires kv_source_layer_ids"),
        ({"kv_source_layer_ids": [3, 5]}, "kv_source_layer_ids", "no kv source is at or below"),
        ({"kv_source_layer_ids": [0, 1, 3, 5]}, "kv_source_layer_ids", "compressor supports"),
        ({"index_source_layer_ids": [2, 3]}, "index_source_layer_ids", "not found on this rank"),
    ],
)
def test_what_vllm_refuses_is_refused_in_one_line(
    tmp_path: Path, changes: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        _resolve(tmp_path, False, **changes)
    reason = str(caught.value)
    assert caught.value.field == field and reason.startswith(f"{field}: ")
    assert words in reason and "\n" not in reason
