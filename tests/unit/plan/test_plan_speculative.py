"""``--speculative-config`` with a draft model: its KV layers share the pool, its weights the GPU.

By hand from the two configs (bundled catalog copies): Llama-3.1-8B has 32 layers of 8 KV heads x
128, so one 16-token block of one layer is 16 x 2 x 8 x 128 x 2 B = 65,536 B and a block of the
model 2,097,152 B; Llama-3.2-1B-Instruct has 16 layers of 8 KV heads x 64: 32,768 B a layer,
524,288 B a block. vLLM 0.19.0 puts both in one uniform-type group (``UniformTypeKVCacheSpecs``:
page = the sum of the layers' pages), so a block costs 2,621,440 B.
"""

from __future__ import annotations

import json

import pytest

from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError

TARGET = "meta-llama/Llama-3.1-8B"
DRAFT = json.dumps({"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3})


def _plan(**kw: object) -> PlanResult:
    fields: dict[str, object] = {
        "model": TARGET,
        "gpu": "H100",
        "engine_version": "0.19.0",
        "max_model_len": 8192,
        "kv_cache_memory_bytes": 10 * 2**30,
    }
    fields.update(kw)
    return make_plan(PlanRequest(**fields))  # type: ignore[arg-type]


def test_draft_layers_share_each_block() -> None:
    plain = _plan()
    spec = _plan(speculative_config=DRAFT)
    assert plain.num_blocks == 10 * 2**30 // 2_097_152 == 5120
    assert spec.num_blocks == 10 * 2**30 // (2_097_152 + 524_288) == 4096
    assert spec.kv_cache_tokens == 4096 * 16
    # per token: (2,097,152 + 524,288) / 16
    assert spec.kv_bytes_per_token_per_rank == 163_840


def test_draft_weights_join_the_gpu() -> None:
    plain = _plan(kv_cache_memory_bytes=None, gpu_memory_utilization=0.9)
    spec = _plan(kv_cache_memory_bytes=None, gpu_memory_utilization=0.9, speculative_config=DRAFT)
    added = spec.ranks[0].weights.num_bytes - plain.ranks[0].weights.num_bytes
    # Llama-3.2-1B: 1,235,814,400 parameters x 2 B (tied embeddings) + its rotary cache
    # 131,072 positions x 64 x 2 B
    assert added == 1_235_814_400 * 2 + 131_072 * 64 * 2
    assert spec.available_kv_bytes == plain.available_kv_bytes - added


def test_ngram_adds_no_kv_and_other_methods_are_refused() -> None:
    ngram = _plan(speculative_config='{"method": "ngram", "num_speculative_tokens": 3}')
    assert ngram.num_blocks == _plan().num_blocks
    with pytest.raises(ConfigError, match=r"^speculative_config: method 'eagle3' is not priced"):
        _plan(speculative_config='{"method": "eagle3", "model": "x"}')
    with pytest.raises(ConfigError, match=r"^speculative_config: .* is not JSON"):
        _plan(speculative_config="{model: x}")


def test_vllm_0_33_prices_the_draft_in_the_same_pool() -> None:
    # vLLM 0.33.0 (PyPI wheel) tags draft specs is_draft=True, a field excluded from equality
    # (v1/kv_cache_interface.py) and read by v1/core/kv_cache_planning.py only to mark EAGLE
    # block-drop groups: the draft's layers share each block as in 0.19 (2,621,440 B a block)
    spec = _plan(speculative_config=DRAFT, engine_version="0.33.0")
    assert spec.engine_version == "0.33.0"
    assert spec.num_blocks == 10 * 2**30 // 2_621_440 == 4096
    assert any("kv_cache_planning.py" in note for note in spec.notes)


def test_newer_than_modelled_says_which_rules_apply() -> None:
    spec = _plan(engine_version="0.34.0")
    assert spec.num_blocks == 5120
    assert any("newer than the newest version kvbudget models (0.33.0)" in n for n in spec.notes)


@pytest.mark.parametrize("method", ["ngram", "ngram_gpu"])
def test_vllm_032_ngram_buffers_come_off_the_kv_cache(method: str) -> None:
    """vLLM 0.32.0 on a GPU runs the V2 model runner (``config/vllm.py`` lines 702-738); with
    either n-gram method (``use_ngram()``) it keeps ``all_token_ids`` dense on the GPU:
    ``max_num_seqs x max_model_len`` int32 (``v1/worker/gpu/model_runner.py`` lines 273-289,
    ``v1/worker/gpu/states.py`` lines 32-42) = 64 x 8,192 x 4 = 2,097,152 B; and the last rank's
    ``NgramGPUSpeculator`` (``v1/worker/gpu/spec_decode/ngram/speculator.py`` lines 184-207)
    ``scratch`` 64 x cdiv(8,192, 256) int64 = 16,384 B and ``drafts`` 64 x 3 int64 = 1,536 B.
    All are allocated when the runner is built, after the start-up snapshot, so they come off the
    KV cache: 2,115,072 B less than without them."""
    base = {
        "engine_version": "0.32.0",
        "kv_cache_memory_bytes": None,
        "gpu_memory_utilization": 0.9,
        "max_num_seqs": 64,
    }
    config = json.dumps({"method": method, "num_speculative_tokens": 3})
    plain = _plan(**base)
    spec = _plan(**base, speculative_config=config)
    added = spec.ranks[0].weights.num_bytes - plain.ranks[0].weights.num_bytes
    assert added == 64 * 8192 * 4 + 64 * 32 * 8 + 64 * 3 * 8 == 2_115_072
    assert spec.available_kv_bytes == plain.available_kv_bytes - added
    assert "n-gram buffers" in spec.weights.method


def test_ngram_buffers_after_032_are_said_to_be_assumed() -> None:
    """Only vLLM 0.32.0's V2 runner was read: 0.33.0 keeps the same bytes and says it assumed
    them; 0.32.0 says nothing of the kind."""
    base = {"kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.9, "max_num_seqs": 64}
    config = json.dumps({"method": "ngram", "num_speculative_tokens": 3})
    read = _plan(**base, engine_version="0.32.0", speculative_config=config)
    later = _plan(**base, engine_version="0.33.0", speculative_config=config)
    assert "not re-read" not in read.weights.method
    assert "vLLM 0.33.0: assumed the same (not re-read)" in later.weights.method
    plain = _plan(**base, engine_version="0.33.0")
    added = later.ranks[0].weights.num_bytes - plain.ranks[0].weights.num_bytes
    assert added == 64 * 8192 * 4 + 64 * 32 * 8 + 64 * 3 * 8


def test_ngram_before_032_keeps_no_buffer_and_ngram_gpu_is_refused() -> None:
    """Only 0.32.0's runner was read (kvbudget.capacity.ngram_buffers)."""
    base = {"kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.9}
    ngram = _plan(**base, speculative_config='{"method": "ngram", "num_speculative_tokens": 3}')
    assert ngram.available_kv_bytes == _plan(**base).available_kv_bytes
    with pytest.raises(ConfigError, match=r"^speculative_config: method ngram_gpu with vLLM 0.19"):
        _plan(speculative_config='{"method": "ngram_gpu", "num_speculative_tokens": 3}')


def test_ngram_without_tokens_is_refused_in_vllms_words() -> None:
    with pytest.raises(ConfigError, match=r"'num_speculative_tokens must be provided with spec"):
        _plan(
            engine_version="0.32.0",
            kv_cache_memory_bytes=None,
            speculative_config='{"method": "ngram"}',
        )
