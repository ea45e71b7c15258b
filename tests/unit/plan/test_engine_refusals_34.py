"""Issue #34: where SGLang and llama.cpp serve DeepSeek-V4, MiniMax-M3 and Inkling with pools
kvbudget has not modelled, the refusal is one line naming the engine's own source; where the
engine lacks the architecture, it says so.

Facts checked in the engines' source (not in kvbudget):

* sglang 0.5.23 wheel: DeepSeek-V4's pools (``srt/mem_cache/deepseek_v4_memory_pool.py``) are
  modelled, tests/unit/plan/test_plan_sglang_dsv4.py; Inkling's default pools (hybrid SWA beside
  the conv states) too: tests/unit/plan/test_plan_sglang_inkling.py.
* llama.cpp 0c1e570 (llama-cpp-python 0.3.36 ``vendor/llama.cpp``): ``src/llama-arch.cpp`` names
  ``deepseek4`` (line 83) and ``minimax-m3`` (line 140) and nothing for Inkling;
  ``src/llama-model.cpp`` builds ``llama_kv_cache_msa`` for MiniMax-M3 (lines 2375-2395) and
  ``llama_kv_cache_dsv4`` for DeepSeek-V4 (line 2613; modelled, tests/unit/plan/test_llamacpp_dsv4.py).

MiniMax-M3 under llama.cpp is modelled (``llama_kv_cache_msa``), worked by hand from that source:

* ``src/llama-kv-cache-msa.cpp`` lines 32-49: a main ``llama_kv_cache`` over every layer, and an
  indexer ``llama_kv_cache`` with ``n_head_kv = 1`` and ``n_embd_head_k_full =
  indexer_head_size`` on layers ``il >= n_layer_dense_lead`` (``src/llama-model.cpp`` lines
  2375-2395), both ``n_ctx_seq`` cells per stream;
* ``src/llama-kv-cache.cpp`` lines 209-234: every non-MLA cache allocates K (``n_embd_head_k x
  n_head_kv``, ``-ctk``) and V (``n_embd_head_v x n_head_kv``, ``-ctv``): the indexer cache keeps
  a 128-wide V row it never reads;
* ``conversion/minimax.py`` lines 190-198: ``n_layer_dense_lead`` = leading zeros of
  ``moe_layer_freq`` (3 in the published config).

Published MiniMax-M3, f16, ``-c 4096 -np 1``: main 60 x (4 x 128 + 4 x 128) x 2 = 122,880 B per
cell, indexer 57 x (128 + 128) x 2 = 29,184 B: 152,064 x 4,096 = 622,854,144 B; K alone
(60 x 1,024 + 57 x 256) x 4,096 = 311,427,072 B, V the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.llamacpp import llamacpp_kv_split, llamacpp_layout
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from tests.unit.spec.config_file import spec_from_config

INKLING = {
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


def _spec(model_id: str) -> ModelSpec:
    spec = resolve_model(model_id).spec
    assert spec is not None
    return spec


def _one_line(info: pytest.ExceptionInfo[LayoutNotApplicable], *needles: str) -> None:
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message


def test_llamacpp_lines_name_its_source(tmp_path: Path) -> None:
    """DeepSeek-V4 (``llama_kv_cache_dsv4``) is modelled: tests/unit/plan/test_llamacpp_dsv4.py."""
    with pytest.raises(LayoutNotApplicable) as inkling:
        llamacpp_layout(spec_from_config(tmp_path, INKLING), tokens=100, seqs=1, ctx_size=100)
    _one_line(inkling, "no Inkling architecture", "src/llama-arch.cpp")


def test_llamacpp_minimax_m3_main_and_indexer_caches() -> None:
    spec = _spec("MiniMaxAI/MiniMax-M3")
    layout = llamacpp_layout(spec, tokens=4096, seqs=1, ctx_size=4096)
    assert layout.total_bytes == (60 * 2048 + 57 * 512) * 4096 == 622_854_144
    kv = llamacpp_kv_split(spec, tokens=4096, seqs=1, ctx_size=4096)
    assert kv.k_bytes == kv.v_bytes == (60 * 1024 + 57 * 256) * 4096 == 311_427_072


def test_llamacpp_minimax_m3_without_the_converters_fields_is_refused(tmp_path: Path) -> None:
    """transformers' flat ``minimax_m3_vl_text`` config has no ``sparse_attention_config``: the
    converter (``conversion/minimax.py`` line 184) cannot read it."""
    raw = {
        "model_type": "minimax_m3_vl_text",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "index_head_dim": 64,
        "layer_types": ["full_attention"] + ["minimax_m3_sparse"] * 3,
        "torch_dtype": "bfloat16",
    }
    with pytest.raises(LayoutNotApplicable) as info:
        llamacpp_layout(spec_from_config(tmp_path, raw), tokens=100, seqs=1, ctx_size=100)
    _one_line(info, "conversion/minimax.py")
