"""SGLang's pools for Inkling (issue #34): a hybrid SWA token pool beside a conv-state pool.

Every expected number is worked by hand below from SGLang's own source (sglang 0.5.23 wheel,
paths under ``sglang/srt/``), never from kvbudget:

* ``arg_groups/model_overrides/inkling.py`` lines 41-44: ``swa_full_tokens_ratio`` 0.1 and
  ``mamba_full_memory_ratio`` 0.1 unless given; lines 45-56: ``mamba_radix_cache_strategy``
  ``extra_buffer``; lines 61-77: the fa4 attention backend on SM90 / SM100.
* ``configs/inkling.py`` lines 218-256 (``mamba2_cache_params``): on every layer
  (``conv_layer_ids`` = all, lines 199-200) six conv states of ``sconv_kernel_size - 1`` rows:
  2 x ``max(1, num_key_value_heads // tp) * head_dim``, 2 x ``max(1, swa_num_key_value_heads //
  tp) * swa_head_dim``, 2 x ``hidden_size`` (``enable_scattered_sconv`` off by default,
  ``arg_groups/fields/exec_.py`` lines 740-743); bfloat16; temporal ``(0, 0, 0)``.
  ``configs/mamba_utils.py`` lines 116-125: ``mamba_cache_per_req`` = elements x 2 B x layers.
* ``mem_cache/kv_cache_configurator.py`` ``_handle_max_mamba_cache`` (lines 3229-3409), no
  speculative decoding: ``budget = rest * r / (1 + r)`` (GiB), ``max_mamba_cache_size =
  int((budget_bytes - per_req) // per_req)``, the token pool gets ``rest - (size + 1) * per_req``;
  under PP the largest stage's share of the layers (lines 3234-3258).
* ``configs/model_config.py`` lines 2781-2797: sliding layers = ``local_layer_ids``, the rest
  full. ``model_executor/pool_configurator.py`` ``HybridSWAPoolConfigurator``: per token full
  ``kv_heads/tp x (head_dim + v_head_dim) x 2`` and sliding ``swa_kv_heads/tp x (swa_head_dim
  + swa_v_head_dim) x 2`` (lines 703-716); ``cell = full x n_full + ratio x sliding x n_swa``
  (lines 786-802); ``max_total = int(available // cell)`` (lines 907-916); full tokens that
  (page-aligned), sliding tokens ``int(full x ratio)`` page-aligned (lines 859-893); lines
  197-216 refuse a sliding pool at or below ``sliding_window_size + page_size``; lines 667-670
  assert a sliding layer.
* ``kv_cache_configurator.py`` lines 3119-3172 ``resolve_max_num_reqs``: ``min(max(int(tokens /
  context_len * 512), 2048), 4096)`` (and ``tokens // 2``), then ``max_mamba_cache_size //
  ratio``, ratio = 3 (line 227) + 2 tracking slots (``get_mamba_tracking_slots(extra_buffer=True,
  overlap=True)``, ``mem_cache/allocation_sizing.py`` lines 11-19; lines 3062-3088) = 5.
* ``arg_groups/overrides.py`` lines 1273-1297: fa4 on SM100 takes 128-token pages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.units import GiB, MiB
from tests.unit.spec.config_file import spec_from_config

#: vLLM's Inkling format (the one kvbudget reads as SGLang's InklingModelConfig fields): 12
#: layers, full at 3, 7, 11 (not in local_layer_ids), sliding elsewhere
INK = {
    "model_type": "inkling_model",
    "num_hidden_layers": 12,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "swa_num_attention_heads": 16,
    "swa_num_key_value_heads": 8,
    "swa_head_dim": 64,
    "sliding_window_size": 512,
    "local_layer_ids": [0, 1, 2, 4, 5, 6, 8, 9, 10],
    "sconv_kernel_size": 4,
    "torch_dtype": "bfloat16",
}

REST = 10 * GiB  # 10,737,418,240 B given with --kv-cache-memory
# conv state, one layer, TP 1: 3 rows x (2 x 4 x 128 + 2 x 8 x 64 + 2 x 2,048) = 3 x 6,144
# elements x 2 B = 36,864 B; 12 layers: 442,368 B per request
PER_REQ = 12 * 3 * (2 * 4 * 128 + 2 * 8 * 64 + 2 * 2048) * 2
# budget = 10 GiB x 0.1 / 1.1 = 976,128,930.9 B; (976,128,930.9 - 442,368) // 442,368 = 2,205
SLOTS = 2_205
# token rest: 10,737,418,240 - 2,206 x 442,368 = 10,737,418,240 - 975,863,808 = 9,761,554,432
TOKEN_REST = 9_761_554_432
# per token: full 4 x (128 + 128) x 2 = 2,048 B x 3 layers = 6,144; sliding 8 x (64 + 64) x 2
# = 2,048 B x 9 layers = 18,432; cell = 6,144 + 0.1 x 18,432 = 7,987.2
# 9,761,554,432 // 7,987.2 = 1,222,149 (1,222,149 x 7,987.2 = 9,761,548,492.8)
FULL_TOKENS = 1_222_149
SWA_TOKENS = 122_214  # int(1,222,149 x 0.1)


def _model(tmp_path: Path, **changes: object) -> str:
    path = tmp_path / "inkling.json"
    path.write_text(json.dumps({**INK, **changes}), encoding="utf-8")
    return str(path)


def _plan(tmp_path: Path, gpu: str = "H200", **extra: object) -> PlanResult:
    fields: dict[str, object] = {
        "engine": "sglang",
        "engine_version": "0.5.23",
        "gpu": gpu,
        "kv_cache_memory_bytes": REST,
        "weights_bytes": 10 * GiB,
        "max_model_len": 8192,
        **extra,
    }
    return make_plan(PlanRequest(model=_model(tmp_path), **fields))  # type: ignore[arg-type]


def test_hand_figures_are_consistent() -> None:
    assert PER_REQ == 442_368
    assert REST - (SLOTS + 1) * PER_REQ == TOKEN_REST
    assert FULL_TOKENS * 79_872 <= TOKEN_REST * 10 < (FULL_TOKENS + 1) * 79_872  # cell x 10


def test_state_pool_then_hybrid_swa_pool(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    sg = plan.sglang
    assert sg is not None
    assert sg.mamba_full_memory_ratio == 0.1
    assert sg.mamba_state_bytes_per_request == PER_REQ
    assert sg.max_mamba_cache_size == SLOTS
    assert sg.mamba_pool_bytes == (SLOTS + 1) * PER_REQ
    assert sg.swa_full_tokens_ratio == 0.1
    assert sg.max_total_num_tokens == FULL_TOKENS
    assert sg.full_tokens == FULL_TOKENS
    assert sg.swa_tokens == SWA_TOKENS
    assert plan.kv_cache_tokens == FULL_TOKENS
    assert sg.page_size == 1  # fa4 on Hopper keeps the default page
    # min(max(int(1,222,149 / 8,192 x 512), 2048), 4096) = 4096; 2,205 // 5 = 441
    assert sg.max_running_requests == 441
    # the pools on the GPU: full 1,222,149 x 6,144 + sliding 122,214 x 18,432 + the state pool
    assert plan.ranks[0].kv_pool_bytes == (
        FULL_TOKENS * 6_144 + SWA_TOKENS * 18_432 + (SLOTS + 1) * PER_REQ
    )
    assert "swa_full_tokens_ratio" in plan.defaults_applied
    assert plan.fits and plan.error is None


def test_tp2_splits_kv_convs_not_the_hidden_stream(tmp_path: Path) -> None:
    # conv: 3 x (2 x 2 x 128 + 2 x 4 x 64 + 2 x 2,048) x 2 B = 30,720 B x 12 = 368,640 B
    per_req = 12 * 3 * (2 * 2 * 128 + 2 * 4 * 64 + 2 * 2048) * 2
    assert per_req == 368_640
    sg = _plan(tmp_path, tp=2).sglang
    assert sg is not None
    assert sg.mamba_state_bytes_per_request == per_req
    # (976,128,930.9 - 368,640) // 368,640 = 2,646; rest 10,737,418,240 - 2,647 x 368,640
    # = 9,761,628,160; cell 2 x 256 x 2 x 3 + 0.1 x 4 x 128 x 2 x 9 = 3,072 + 921.6 = 3,993.6
    assert sg.max_mamba_cache_size == 2_646
    assert 9_761_628_160 * 10 // 39_936 == 2_444_317
    assert sg.full_tokens == 2_444_317
    assert sg.swa_tokens == 244_431


def test_sm100_takes_128_token_pages(tmp_path: Path) -> None:
    plan = _plan(tmp_path, gpu="B200")
    sg = plan.sglang
    assert sg is not None
    # the same budget: 1,222,149 floored to 128 = 1,222,144; int(x 0.1) = 122,214 -> 122,112
    assert sg.page_size == 128
    assert sg.full_tokens == 1_222_144
    assert sg.swa_tokens == 122_112
    assert plan.defaults_applied["page_size"].startswith("128")


def test_pp2_takes_the_smaller_stage_pool(tmp_path: Path) -> None:
    # stages [0, 6) and [6, 12): 6 conv layers each -> per_req x 6/12 = 221,184 B
    # (976,128,930.9 - 221,184) // 221,184 = 4,412; rest 10,737,418,240 - 4,413 x 221,184
    # = 9,761,333,248. Stage 0: full {3}, sliding 5: 2,048 + 0.1 x 10,240 = 3,072 ->
    # 3,177,517; stage 1: full {7, 11}, sliding 4: 4,096 + 0.1 x 8,192 = 4,915.2 -> 1,985,948
    sg = _plan(tmp_path, pp=2).sglang
    assert sg is not None
    assert sg.mamba_state_bytes_per_request == 221_184
    assert sg.max_mamba_cache_size == 4_412
    assert 9_761_333_248 * 10 // 49_152 == 1_985_948
    assert sg.full_tokens == 1_985_948
    assert sg.swa_tokens == 198_594


def test_a_sliding_pool_below_window_plus_page_fails(tmp_path: Path) -> None:
    # 40 MiB: budget 41,943,040 x 0.1 / 1.1 = 3,813,003.6; (3,813,003.6 - 442,368) // 442,368 = 7;
    # rest 41,943,040 - 8 x 442,368 = 38,404,096; // 7,987.2 = 4,808 full, 480 sliding tokens
    # <= 512 + 1 (validate_swa_pool_size)
    plan = _plan(tmp_path, kv_cache_memory_bytes=40 * MiB, max_model_len=4096)
    sg = plan.sglang
    assert sg is not None
    assert sg.max_mamba_cache_size == 7
    assert sg.full_tokens == 4_808
    assert sg.swa_tokens == 480
    assert not plan.fits
    assert plan.error is not None and plan.error.startswith("SWA pool (480 tokens)")


def test_given_swa_ratio_wins(tmp_path: Path) -> None:
    # cell 6,144 + 0.5 x 18,432 = 15,360: 9,761,554,432 // 15,360 = 635,517 (x 15,360 =
    # 9,761,541,120); sliding int(635,517 x 0.5) = 317,758
    sg = _plan(tmp_path, swa_full_tokens_ratio=0.5).sglang
    assert sg is not None
    assert sg.full_tokens == 635_517
    assert sg.swa_tokens == 317_758


def test_calc_layout_holds_six_bf16_convs_per_layer(tmp_path: Path) -> None:
    spec = spec_from_config(tmp_path, INK)
    tokens = 100
    # attention at full length (the layout's rule for sliding layers), one state per sequence
    per_seq = tokens * (6_144 + 18_432) + PER_REQ
    assert sglang_layout(spec, tokens=tokens, seqs=2).total_bytes == 2 * per_seq


def test_refusals_name_sglangs_source(tmp_path: Path) -> None:
    with pytest.raises(LayoutNotApplicable, match="at least one SWA layer"):
        make_plan(
            PlanRequest(
                model=_model(tmp_path, local_layer_ids=[]),
                engine="sglang",
                engine_version="0.5.23",
                gpu="H200",
                kv_cache_memory_bytes=REST,
                weights_bytes=10 * GiB,
                max_model_len=8192,
            )
        )
    with pytest.raises(LayoutNotApplicable, match=r"0\.5\.4 wheel has no Inkling"):
        _plan(tmp_path, engine_version="0.5.4")
    text = tmp_path / "text.json"
    text.write_text(json.dumps({**INK, "model_type": "inkling_text"}), encoding="utf-8")
    with pytest.raises(LayoutNotApplicable, match=r"configs/inkling\.py lines 430-439"):
        make_plan(
            PlanRequest(
                model=str(text),
                engine="sglang",
                engine_version="0.5.23",
                gpu="H200",
                kv_cache_memory_bytes=REST,
                weights_bytes=10 * GiB,
                max_model_len=8192,
            )
        )
