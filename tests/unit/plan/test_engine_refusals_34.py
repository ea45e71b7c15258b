"""Issue #34: where SGLang and llama.cpp serve DeepSeek-V4, MiniMax-M3 and Inkling with pools
kvbudget has not modelled, the refusal is one line naming the engine's own source; where the
engine lacks the architecture, it says so.

Facts checked in the engines' source (not in kvbudget):

* sglang 0.5.23 wheel: ``srt/mem_cache/deepseek_v4_memory_pool.py`` (``DeepSeekV4SingleKVPool``
  line 237, ``DeepSeekV4IndexerPool`` line 545); Inkling's tri-pool,
  ``srt/mem_cache/kv_cache_configurator.py`` lines 951-961 (``_init_unified_mamba_swa_pools``).
* llama.cpp 0c1e570 (llama-cpp-python 0.3.36 ``vendor/llama.cpp``): ``src/llama-arch.cpp`` names
  ``deepseek4`` (line 83) and ``minimax-m3`` (line 140) and nothing for Inkling;
  ``src/llama-model.cpp`` builds ``llama_kv_cache_msa`` for MiniMax-M3 (lines 2375-2395) and
  ``llama_kv_cache_dsv4`` for DeepSeek-V4 (line 2613).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.llamacpp import llamacpp_layout
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
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


def test_sglang_deepseek_v4_names_its_pools() -> None:
    with pytest.raises(LayoutNotApplicable) as layout:
        sglang_layout(_spec("deepseek-ai/DeepSeek-V4-Flash"), tokens=100, seqs=1)
    _one_line(layout, "SGLang 0.5.23", "deepseek_v4_memory_pool.py")
    with pytest.raises(LayoutNotApplicable) as plan:  # the planner says the same, not "vllm"
        make_plan(PlanRequest(model="deepseek-ai/DeepSeek-V4-Flash", engine="sglang", gpu="H200"))
    _one_line(plan, "sglang layout", "deepseek_v4_memory_pool.py")


def test_sglang_inkling_names_its_tri_pool(tmp_path: Path) -> None:
    with pytest.raises(LayoutNotApplicable) as info:
        sglang_layout(spec_from_config(tmp_path, INKLING), tokens=100, seqs=1)
    _one_line(info, "short-convolution", "_init_unified_mamba_swa_pools")


def test_llamacpp_lines_name_its_source(tmp_path: Path) -> None:
    with pytest.raises(LayoutNotApplicable) as dsv4:
        llamacpp_layout(_spec("deepseek-ai/DeepSeek-V4-Flash"), tokens=100, seqs=1, ctx_size=100)
    _one_line(dsv4, "0c1e570", "llama_kv_cache_dsv4", "src/llama-model.cpp line 2613")
    with pytest.raises(LayoutNotApplicable) as msa:
        llamacpp_layout(_spec("MiniMaxAI/MiniMax-M3"), tokens=100, seqs=1, ctx_size=100)
    _one_line(msa, "llama_kv_cache_msa", "src/llama-kv-cache-msa.cpp")
    with pytest.raises(LayoutNotApplicable) as inkling:
        llamacpp_layout(spec_from_config(tmp_path, INKLING), tokens=100, seqs=1, ctx_size=100)
    _one_line(inkling, "no Inkling architecture", "src/llama-arch.cpp")
