"""``--speculative-config`` with ``--engine sglang`` (issue #34): SGLang's NextN (MTP) drafter.

Every expected number is worked by hand below from SGLang's own source (sglang 0.5.23 wheel, paths
under ``sglang/srt/``) and the published configs in the catalog, never from kvbudget:

* vLLM's ``{"method": "mtp"}`` is SGLang's ``--speculative-algorithm NEXTN``, run as EAGLE
  (``arg_groups/speculative_hook.py`` lines 109-115); for DeepSeek-V3 / V3.2, GLM-4.5 and GLM-5
  the draft is the target's own checkpoint (lines 1120-1157) with ``num_nextn_predict_layers``
  KV layers (``model_executor/model_runner_components/spec_aux_hidden_state.py`` lines 132-176).
* ``model_executor/pool_configurator.py`` lines 259-314: before sizing the pool the target adds
  the draft to its cell: ``int(cell x draft_layers / layers)``; a DSA model
  ``int(latent_cell x draft_layers / layers)`` plus ``128 + 128 // 128 x 4 = 132`` indexer bytes
  per draft layer (``_compute_dsa_indexer_cell_size(allocate_all_layers=True)``, lines 560-635).
  ``max_total_num_tokens = rest // cell`` (floored to the page: 64 for DSA), and the draft worker
  allocates its pool with the same ``memory_pool_config`` (``mem_cache/kv_cache_configurator.py``
  lines 470-476). The target's "KV Cache is allocated" line is its own layers' pool.
* ``managers/scheduler.py`` lines 1128-1137: the draft worker (and its weights) is built before
  the target's pool is sized; the NextN drafter then holds ``embed_tokens`` and ``lm_head`` of its
  own (``models/deepseek_nextn.py`` lines 83-88, 294-300: ``vocab / tp x hidden`` each, bf16),
  shared with the target only later (``speculative/eagle_worker_v2.py`` lines 243-258,
  336-379), beside one decoder layer, ``eh_proj`` (2 x hidden x hidden, bf16, whole) and three
  norms (lines 90-139).
* ``arg_groups/memory_hook.py`` lines 281-345: 0.5.23's default ``mem_fraction_static`` has no
  speculative term (0.5.4's rule: the tests at the end).

DeepSeek-V3 (catalog): 61 MLA layers, ``kv_lora_rank`` 512 + ``qk_rope_head_dim`` 64, bf16:
1,152 B per layer, not split by TP. DeepSeek-V3.2 adds the DSA indexer row (132 B) on every layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import engine_flag_conflicts, make_plan
from kvbudget.errors import ConfigError
from kvbudget.units import GiB
from tests.unit.plan.test_plan_mtp_weights_vllm import DSV3_MTP_TP8

MTP = '{"method": "mtp", "num_speculative_tokens": 3}'
REST = 10 * GiB  # 10,737,418,240 B given with --kv-cache-memory
ROOT = Path(__file__).resolve().parents[3]
PEER = json.loads(
    (ROOT / "tests" / "peer" / "fixtures" / "vllm_pools_0.32.0.json").read_text("utf-8")
)

# DeepSeek-V3: 61 x 1,152 = 70,272 B per token; the draft int(70,272 x 1 / 61) = 1,152
DSV3_CELL = 61 * (512 + 64) * 2
DSV3_DRAFT = 1_152
# 10,737,418,240 // 71,424 = 150,333 (150,333 x 71,424 = 10,737,384,192)
DSV3_TOKENS = 150_333
# DeepSeek-V3.2 (bf16 on H200): 61 x (1,152 + 132) = 78,324; draft int(61 x 1,152 / 61) + 132
DSV32_CELL = 61 * (1_152 + 132)
DSV32_DRAFT = 1_152 + 132
# 10,737,418,240 // 79,608 = 134,878, floored to 64-token pages: 134,848
DSV32_TOKENS = 134_848


def _plan(model: str, version: str = "0.5.23", **extra: object) -> PlanResult:
    fields: dict[str, object] = {
        "engine": "sglang",
        "engine_version": version,
        "gpu": "H200",
        "tp": 8,
        "max_model_len": 8192,
        **extra,
    }
    return make_plan(PlanRequest(model=model, **fields))  # type: ignore[arg-type]


def test_hand_figures_are_consistent() -> None:
    assert DSV3_CELL == 70_272 and DSV3_CELL * 1 // 61 == DSV3_DRAFT
    assert REST // (DSV3_CELL + DSV3_DRAFT) == DSV3_TOKENS
    assert REST // (DSV32_CELL + DSV32_DRAFT) // 64 * 64 == DSV32_TOKENS


def test_deepseek_v3_draft_layer_joins_the_cell() -> None:
    plain = _plan("deepseek-ai/DeepSeek-V3", kv_cache_memory_bytes=REST).sglang
    assert plain is not None and plain.cell_size_bytes == DSV3_CELL
    plan = _plan("deepseek-ai/DeepSeek-V3", kv_cache_memory_bytes=REST, speculative_config=MTP)
    sg = plan.sglang
    assert sg is not None
    assert sg.cell_size_bytes == DSV3_CELL + DSV3_DRAFT
    assert sg.max_total_num_tokens == DSV3_TOKENS
    # both pools on the GPU: the target's layers and the draft's, the same tokens
    assert plan.ranks[0].kv_pool_bytes == DSV3_TOKENS * (DSV3_CELL + DSV3_DRAFT)
    # the target's own line: 150,333 x 70,272 / 2^30 = 9.84 GB
    assert sg.log_line == "KV Cache is allocated. #tokens: 150333, KV size: 9.84 GB"
    assert sg.mem_fraction_static == plain.mem_fraction_static  # no speculative reserve in 0.5.23
    # speculative_hook.py lines 1086-1094: 48 by default; min(48, 150,333 // 2) (lines 3127-3131)
    assert sg.max_running_requests == 48
    assert any("NEXTN" in n for n in plan.notes)


def test_deepseek_v32_draft_adds_its_indexer_row() -> None:
    sg = _plan(
        "deepseek-ai/DeepSeek-V3.2", kv_cache_memory_bytes=REST, speculative_config=MTP
    ).sglang
    assert sg is not None
    assert sg.cell_size_bytes == DSV32_CELL + DSV32_DRAFT
    assert sg.max_total_num_tokens == DSV32_TOKENS


def test_glm4_moe_draft_is_the_average_layer(tmp_path: Path) -> None:
    # the tiny GLM-4.5 of the vLLM fixture: 8 layers of 2 KV heads x (64 + 64) x 2 B = 512 B
    # (TP 1): cell 4,096, draft int(4,096 x 1 / 8) = 512; 1 GiB // 4,608 = 233,016
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PEER["cases"]["glm4_moe"]["config"]), encoding="utf-8")
    sg = _plan(
        str(path), tp=1, kv_cache_memory_bytes=GiB, max_model_len=4096, speculative_config=MTP
    ).sglang
    assert sg is not None
    assert sg.cell_size_bytes == 4_096 + 512
    assert sg.max_total_num_tokens == 233_016


def test_drafter_weights_come_out_of_the_rest() -> None:
    """Computed weights: the drafter's decoder layer, eh_proj and norms (the hand figure of
    test_plan_mtp_weights_vllm.py, the same DeepSeek layer) plus its own embed_tokens and
    lm_head: 129,280 / 8 = 16,160 rows x 7,168 x 2 B = 231,669,760 B each."""
    drafter = DSV3_MTP_TP8 + 2 * 16_160 * 7_168 * 2
    plain = _plan("deepseek-ai/DeepSeek-V3")
    plan = _plan("deepseek-ai/DeepSeek-V3", speculative_config=MTP)
    assert plan.weights.per_rank_bytes[0] - plain.weights.per_rank_bytes[0] == drafter
    assert plain.available_kv_bytes - plan.available_kv_bytes == drafter


def test_weights_bytes_flag_is_taken_whole() -> None:
    plan = _plan("deepseek-ai/DeepSeek-V3", weights_bytes=80 * GiB, speculative_config=MTP)
    assert plan.weights.per_rank_bytes == (80 * GiB,)


def test_ngram_keeps_no_draft_pool() -> None:
    plain = _plan("deepseek-ai/DeepSeek-V3", kv_cache_memory_bytes=REST)
    plan = _plan(
        "deepseek-ai/DeepSeek-V3",
        kv_cache_memory_bytes=REST,
        speculative_config='{"method": "ngram", "num_speculative_tokens": 3}',
    )
    assert plan.kv_cache_tokens == plain.kv_cache_tokens
    assert plan.max_num_seqs == 48  # speculative_hook.py lines 1294-1298
    assert any("NGRAM" in n for n in plan.notes)


def test_the_flag_is_no_longer_an_ignored_knob() -> None:
    request = PlanRequest(
        model="deepseek-ai/DeepSeek-V3", engine="sglang", gpu="H200", speculative_config=MTP
    )
    assert [f for f, _ in engine_flag_conflicts(request)] == []


@pytest.mark.parametrize(
    ("model", "version", "config", "needle"),
    [
        (
            "deepseek-ai/DeepSeek-V3",
            "0.5.23",
            '{"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}',
            "--speculative-draft-model-path",
        ),
        ("deepseek-ai/DeepSeek-V3", "0.5.23", '{"method": "eagle3", "model": "x"}', "'eagle3'"),
        ("deepseek-ai/DeepSeek-V3.2", "0.5.4", MTP, "--engine-version 0.5.23"),
        ("Qwen/Qwen2.5-72B-Instruct", "0.5.23", MTP, "'qwen2'"),
        (
            "Qwen/Qwen3-Next-80B-A3B-Thinking",
            "0.5.23",
            '{"method": "ngram", "num_speculative_tokens": 3}',
            "intermediate states",
        ),
    ],
)
def test_refusals_are_one_line(model: str, version: str, config: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        _plan(model, version, kv_cache_memory_bytes=REST, speculative_config=config)
    message = str(info.value)
    assert message.startswith("speculative_config: ") and "\n" not in message
    assert needle in message


def test_pp_is_refused() -> None:
    with pytest.raises(ConfigError, match="--pp > 1"):
        _plan("deepseek-ai/DeepSeek-V3", kv_cache_memory_bytes=REST, pp=2, speculative_config=MTP)


# sglang 0.5.4 (the wheel; kvbudget's rule before 0.5.23), worked from its source:
# * server_args.py lines 786-795: H200 (143,771 MiB, TP 8): reserved 512 + 8,192 x 1.5 + 512 x 2
#   (lines 728-736: chunk 8k, graph max bs 512) + 8 / 8 x 1,024 = 14,848 MiB (above the 10 GiB
#   floor), + 2,048 for EAGLE / NEXTN = 16,896: round(126,875 / 143,771, 3) = 0.882 (0.897
#   without the drafter);
# * lines 1289-1294: max_running_requests 48; lines 1349-1358: num_speculative_tokens 3 is
#   steps 3, topk 1, draft tokens 4;
# * model_runner.py lines 1667-1687: tokens = rest // cell (the target's 70,272) = 152,797, then
#   + 48 x 3 x 1 + 48 x 4 + 100 = + 436 -> 153,233 for both pools.
LEGACY_TOKENS = 10 * GiB // DSV3_CELL + 48 * 3 * 1 + 48 * 4 + 100


def test_054_raises_the_pool_past_the_rest() -> None:
    assert LEGACY_TOKENS == 153_233
    plan = _plan(
        "deepseek-ai/DeepSeek-V3", "0.5.4", kv_cache_memory_bytes=REST, speculative_config=MTP
    )
    sg = plan.sglang
    assert sg is not None
    assert sg.max_total_num_tokens == LEGACY_TOKENS
    assert sg.mem_fraction_static == 0.882
    assert sg.max_running_requests == 48
    # both pools of 153,233 tokens: more than the 10 GiB rest (the headroom pays)
    assert plan.ranks[0].kv_pool_bytes == LEGACY_TOKENS * (DSV3_CELL + DSV3_DRAFT)
    assert plan.ranks[0].kv_pool_bytes > REST
    plain = _plan("deepseek-ai/DeepSeek-V3", "0.5.4", kv_cache_memory_bytes=REST).sglang
    assert plain is not None and plain.mem_fraction_static == 0.897


def test_054_drafter_weights_stay_out_of_the_rest() -> None:
    drafter = DSV3_MTP_TP8 + 2 * 16_160 * 7_168 * 2
    plain = _plan("deepseek-ai/DeepSeek-V3", "0.5.4", mem_fraction_static=0.88)
    plan = _plan(
        "deepseek-ai/DeepSeek-V3", "0.5.4", mem_fraction_static=0.88, speculative_config=MTP
    )
    assert plan.available_kv_bytes == plain.available_kv_bytes
    assert plan.weights.per_rank_bytes[0] - plain.weights.per_rank_bytes[0] == drafter


def test_054_auto_steps_without_num_speculative_tokens() -> None:
    # DeepSeek's auto choice (server_args.py lines 3805-3835): (3, 1, 4), the same 436 tokens
    sg = _plan(
        "deepseek-ai/DeepSeek-V3",
        "0.5.4",
        kv_cache_memory_bytes=REST,
        speculative_config='{"method": "mtp"}',
    ).sglang
    assert sg is not None and sg.max_total_num_tokens == LEGACY_TOKENS


def test_glm5_draft_layer_is_a_dsa_layer() -> None:
    # GLM-5 (catalog): 78 DSA layers of 1,152 + 132 = 100,152 B per token; the draft
    # int(78 x 1,152 / 78) + 132 = 1,284 -> 101,436; 10 GiB // 101,436 = 105,854, floored to
    # 64-token pages: 105,792
    sg = _plan("zai-org/GLM-5", kv_cache_memory_bytes=REST, speculative_config=MTP).sglang
    assert sg is not None
    assert sg.cell_size_bytes == 78 * 1_284 + 1_284
    assert sg.max_total_num_tokens == 105_792
