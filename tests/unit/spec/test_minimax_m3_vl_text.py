"""Issue #34: transformers' own name for MiniMax-M3's text config, ``minimax_m3_vl_text``
(transformers 5.24 ``configuration_minimax_m3_vl.py`` line 55, ``MiniMaxM3VLTextConfig``), is read
as ``minimax_m3``.

transformers writes that config flat: ``__post_init__`` pops ``sparse_attention_config`` and sets
``index_head_dim`` from ``sparse_index_dim`` and ``layer_types`` (``minimax_m3_sparse`` where
``sparse_attention_freq`` is 1). Its cache (``modeling_minimax_m3_vl.py``): K/V of
``num_key_value_heads x head_dim`` on every layer, plus one indexer key head of ``index_head_dim``
on each sparse layer (``MiniMaxM3VLIndexer`` line 549 ``k_proj``, line 570 ``update_index``).
Published MiniMax-M3 (60 layers, 4 KV heads of 128, 57 sparse layers, index 128), bf16, 100
tokens: 60 x 2 x 4 x 128 x 2 x 100 = 12,288,000 + 57 x 128 x 2 x 100 = 1,459,200 -> 13,747,200 B.

vLLM 0.32 and SGLang 0.5.23 find the sparse layers only in ``sparse_attention_config``
(vLLM ``models/minimax_m3/nvidia/model.py`` lines 99-107; SGLang ``srt/configs/model_config.py``
lines 446-457 raises "Could not find sparse config"), so a flat config is refused there.
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
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.model import ModelSpec
from tests.unit.spec.config_file import spec_from_config

T = 100


def _published() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((MODELS_DIR / "MiniMaxAI--MiniMax-M3.json").read_text("utf-8"))
    return raw


def _as_transformers_writes_it() -> dict[str, Any]:
    raw = _published()
    sparse = raw.pop("sparse_attention_config")
    raw.update(
        model_type="minimax_m3_vl_text",
        index_head_dim=sparse["sparse_index_dim"],
        index_n_heads=sparse["sparse_num_index_heads"],
        index_block_size=sparse["sparse_block_size"],
        index_topk_blocks=sparse["sparse_topk_blocks"],
        index_local_blocks=sparse["sparse_local_block"],
        layer_types=[
            "minimax_m3_sparse" if f else "full_attention" for f in sparse["sparse_attention_freq"]
        ],
    )
    return raw


def _hf(spec: ModelSpec) -> int:
    return hf_layout(spec, tokens=T, seqs=1, kv_dtype="bfloat16").total_bytes


def test_flat_transformers_config_reads_as_minimax_m3(tmp_path: Path) -> None:
    spec = spec_from_config(tmp_path, _as_transformers_writes_it())
    assert spec.model_type == "minimax_m3_vl_text"
    assert _hf(spec) == 60 * 2 * 4 * 128 * 2 * T + 57 * 128 * 2 * T == 13_747_200


def test_published_config_renamed_is_the_same(tmp_path: Path) -> None:
    spec = spec_from_config(tmp_path, {**_published(), "model_type": "minimax_m3_vl_text"})
    assert _hf(spec) == 13_747_200
    # with sparse_attention_config the engines read it as they read minimax_m3: vLLM's one
    # 128-token block holds every layer's K/V and 57 index keys (tests/unit/plan/
    # test_plan_minimax_m3_vllm.py): 15,728,640 + 1,867,776
    layout = vllm_layout(spec, tokens=T, seqs=1)
    assert sum(g.bytes_total for s in layout.stages for g in s.groups) == 17_596_416


def test_transformers_default_has_no_sparse_layer(tmp_path: Path) -> None:
    """``MiniMaxM3VLTextConfig()`` (60 layers, 4 KV heads of 128): ``layer_types`` all
    ``full_attention`` (``__post_init__`` without ``sparse_attention_config``), so
    ``index_head_dim`` and the indexer's query fields size nothing."""
    module = pytest.importorskip("transformers.models.minimax_m3_vl.configuration_minimax_m3_vl")
    raw = module.MiniMaxM3VLTextConfig().to_dict()
    assert set(raw["layer_types"]) == {"full_attention"}
    spec = spec_from_config(tmp_path, {**raw, "torch_dtype": "bfloat16"})
    assert _hf(spec) == 60 * 2 * 4 * 128 * 2 * T


@pytest.mark.parametrize("layout", [vllm_layout, sglang_layout])
def test_engines_refuse_sparse_layers_named_only_in_layer_types(
    tmp_path: Path, layout: Any
) -> None:
    spec = spec_from_config(tmp_path, _as_transformers_writes_it())
    with pytest.raises(LayoutNotApplicable, match=r"^sparse_attention_config: ") as info:
        layout(spec, tokens=T, seqs=1)
    assert "\n" not in str(info.value)


def test_vl_wrapper_whose_text_config_names_no_model_type(tmp_path: Path) -> None:
    """NVIDIA's NVFP4 export (aiconfigurator-core 0.12.0 ``model_configs/
    nvidia--MiniMax-M3-NVFP4_config.json``) saves the ``minimax_m3_vl`` wrapper with a
    ``text_config`` that names no ``model_type``: transformers reads it as
    ``MiniMaxM3VLTextConfig`` (``minimax_m3_vl_text``), the published decoder (13,747,200 B at 100
    tokens, worked above). Before, its ``sparse_attention_config`` made it not_applicable."""
    text = {k: v for k, v in _published().items() if k not in ("model_type", "architectures")}
    wrapper = {
        "architectures": ["MiniMaxM3VLForConditionalGeneration"],
        "model_type": "minimax_m3_vl",
        "text_config": text,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(tmp_path, wrapper)
    assert spec.model_type == "minimax_m3_vl_text"
    assert _hf(spec) == 13_747_200
