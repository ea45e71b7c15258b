"""SGLang's pools for Dots3-Note (``dots3_note``): a hybrid MLA-SWA ``SWAKVPool``, DSA full side.

No SGLang log can be recorded here (the model needs CUDA DSA kernels). Every expected number is
worked by hand from the sglang 0.5.23 wheel (``pip download sglang==0.5.23 --no-deps``; paths under
``sglang/srt/``):

* ``configs/dots3.py`` line 20 ``is_hybrid_swa = True``; ``configs/model_config.py`` lines
  2711-2722: layers named ``sliding_attention`` go to the SWA pool, ``full_attention`` to the
  full pool. The tiny config below (that of ``test_plan_dots3_vllm.py``) has full layers 0, 1, 5
  (3) and sliding layers 2, 3, 4, 6, 7 (5).
* ``mem_cache/kv_cache_configurator.py`` lines 1858-1865 -> ``_build_hybrid_mla_swa_kv_pool``
  (lines 2401-2460): full side ``DSATokenToKVPool`` of ``kv_lora_rank + qk_rope_head_dim`` = 512 +
  64 (the DSA layers' own width), SWA side ``MLATokenToKVPool`` of ``swa_kv_lora_rank +
  swa_qk_rope_head_dim`` = 1024 + 64.
* ``model_executor/pool_configurator.py`` lines 676-702 (``HybridSWAPoolConfigurator``, MLA):
  ``_full_per_token = calculate_mla_kv_cache_dim * kv_size + 132`` (the indexer: ``128 + 128 //
  128 * 4`` uint8, lines 690-699); bfloat16: ``(512 + 64) * 2 + 132 = 1,284``; fp8 on Hopper
  (``flashmla_kv``, scaled row, ``kv_cache_configurator.py`` lines 3464-3473): ``512 + 4 * 4 + 64 *
  2 + 132 = 788``; fp8 on Blackwell (``trtllm``, raw row, lines 3434-3440; ``arg_groups/
  overrides.py`` line 716): ``576 + 132 = 708``. ``_swa_per_token = (1024 + 64) * kv_size``:
  2,176 bfloat16, 1,088 fp8.
* lines 786-803: ``cell = full_per_token * 3 + ratio * swa_per_token * 5``; line 915
  ``int(rest // cell)``; lines 879-881 ``full = floor64(max_total)``, ``swa = floor64(int(full *
  ratio))``; ratio 0.8 by default (``arg_groups/fields/schedule.py`` lines 150-161); lines 197-216
  the SWA pool must exceed ``sliding_window_size + page`` = (128 - 1) + 64 (``models/dots3_common/
  modeling.py`` line 503).
* ``arg_groups/model_overrides/deepseek_v2.py`` lines 162-173: 64-token pages; ``arg_groups/
  overrides.py`` lines 532-535: ``auto`` is bfloat16 below compute capability 10, fp8_e4m3 from 10.
* ``mem_cache/kv_cache_configurator.py`` lines 3123-3132: ``max_running_requests = min(clamp(int(
  tokens / context_len * 512), 2048, 4096), tokens // 2)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.kvbytes import calc_model
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.sglang_dots3 import sglang_pp_indices
from kvbudget.capacity.memory import CUDA_CONTEXT_BYTES
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.sglang_pool import rest_memory_bytes
from kvbudget.errors import ConfigError, KvbudgetError
from kvbudget.units import GiB, MiB
from tests.unit.config_files import write_config
from tests.unit.plan.test_plan_dots3_vllm import DOTS3 as VLLM_DOTS3

#: SGLang asserts equal query and KV heads on both kinds (modeling.py lines 586-589); the vLLM
#: test's config leaves swa_num_key_value_heads to SGLang's default 32 (configs/dots3.py line 66)
DOTS3: dict[str, Any] = {**VLLM_DOTS3, "swa_num_key_value_heads": 64}
FULL_BF16 = (512 + 64) * 2 + 132  # 1,284
SWA_BF16 = (1024 + 64) * 2  # 2,176
KV = 1 * GiB  # 1,073,741,824


def _config(tmp_path: Path, **changes: Any) -> str:
    return write_config(tmp_path, DOTS3, **changes)


def _plan(model: str, **extra: Any) -> PlanResult:
    fields: dict[str, Any] = {
        "model": model,
        "engine": "sglang",
        "gpu": "H200",
        "kv_cache_memory_bytes": KV,
        "max_model_len": 4096,
        **extra,
    }
    return make_plan(PlanRequest(**fields))


def test_calc_layout_worked_by_hand(tmp_path: Path) -> None:
    # 1,000 tokens take 16 pages (1,024 cells) of the 3 full layers: 3 x 1,284 = 3,852 B a token;
    # a sliding layer holds at most SGLang's per-request SWA worst case (compute_swa_request_cap,
    # pool_configurator.py lines 924-968): window 127 + eviction interval 128 (environ.py line
    # 730) + page 64 + decode page 64 = 383 tokens, 5 x 2,176 = 10,880 B each
    result = calc_model(_config(tmp_path), tokens=1000, engine="sglang")
    assert result.kv_dtype == "bfloat16"
    got = [
        (g["kind"], g["num_layers"], g["tokens_kept"], g["bytes_per_token"]) for g in result.groups
    ]
    assert got == [("mla", 3, 1024, 3 * FULL_BF16), ("sliding", 5, 383, 5 * SWA_BF16)]
    assert result.total_bytes == 1024 * 3_852 + 383 * 10_880 == 8_111_488


def test_pool_tokens_worked_by_hand_h200_tp1(tmp_path: Path) -> None:
    # cell = 3 x 1,284 + 0.8 x 5 x 2,176 = 3,852 + 8,704 = 12,556;
    # 1,073,741,824 // 12,556 = 85,516 -> floor64 85,504; swa int(68,403.2) -> floor64 68,352
    plan = _plan(_config(tmp_path))
    assert plan.sglang is not None
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (85_504, 68_352)
    assert plan.kv_cache_tokens == plan.sglang.max_total_num_tokens == 85_504
    assert plan.sglang.page_size == 64
    assert plan.sglang.swa_full_tokens_ratio == 0.8
    assert plan.log_lines == (
        "Use sliding window memory pool. full_layer_tokens=85504, swa_layer_tokens=68352",
    )
    # resolve_max_num_reqs: int(85,504 / 4,096 x 512) = 10,688 -> 4,096; tokens // 2 = 42,752
    assert plan.max_num_seqs == 4096
    assert plan.ranks[0].kv_pool_bytes == 85_504 * 3_852 + 68_352 * 10_880
    assert plan.fits and plan.error is None
    assert plan.max_concurrency == 85_504 / 4096


def test_tp_does_not_split_the_latent(tmp_path: Path) -> None:
    # MLA rows are replicated on every attention-TP rank: TP 4 holds what TP 1 holds
    plan = _plan(_config(tmp_path), tp=4)
    assert plan.sglang is not None
    assert plan.sglang.full_tokens == 85_504
    assert plan.kv_bytes_per_token_replica == 4 * (3_852 + 10_880)


def test_ratio_and_max_running_requests(tmp_path: Path) -> None:
    # ratio 0.5: cell = 3,852 + 5,440 = 9,292; 1,073,741,824 // 9,292 = 115,555 -> 115,520;
    # swa int(57,760) -> floor64 57,728; --max-running-requests 100,000 -> min(., 115,520 // 2)
    plan = _plan(_config(tmp_path), swa_full_tokens_ratio=0.5, max_num_seqs=100_000)
    assert plan.sglang is not None
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (115_520, 57_728)
    assert plan.max_num_seqs == 57_760


def test_max_total_tokens_resolves_both_pools_again(tmp_path: Path) -> None:
    # kv_cache_configurator.py lines 3096-3106, 3221-3226 -> calculate_pool_sizes_from_max_tokens
    # (pool_configurator.py lines 918-922): full floor64(10,000) = 9,984; swa int(7,987.2) ->
    # floor64 7,936
    plan = _plan(_config(tmp_path), max_total_tokens=10_000)
    assert plan.sglang is not None
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (9_984, 7_936)


def test_a_small_swa_pool_bounds_concurrency(tmp_path: Path) -> None:
    # ratio 0.01: cell = 3,852 + 108.8 = 3,960.8; 1,073,741,824 // 3,960.8 = 271,092 -> 271,040;
    # swa int(2,710.4) -> 2,688; a 4,096-token request holds at most 383 SWA tokens:
    # 2,688 / 383 = 7.02 < 271,040 / 4,096 = 66.17
    plan = _plan(_config(tmp_path), swa_full_tokens_ratio=0.01)
    assert plan.sglang is not None
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (271_040, 2_688)
    assert plan.max_concurrency == pytest.approx(2_688 / 383)
    assert any("SWA pool bounds concurrency" in note for note in plan.notes)


def test_pipeline_stages_split_as_sglang_does(tmp_path: Path) -> None:
    # SGLang gives the remainder to the LAST stages (distributed/utils.py lines 136-148)
    assert [sglang_pp_indices(61, r, 2) for r in range(2)] == [(0, 30), (30, 61)]
    assert [sglang_pp_indices(8, r, 3) for r in range(3)] == [(0, 2), (2, 5), (5, 8)]
    # 8 layers / 2: stage 0 full {0, 1} swa {2, 3}: 2,568 + 0.8 x 4,352 = 6,049.6 -> 177,489 ->
    # 177,472; stage 1 full {5} swa {4, 6, 7}: 1,284 + 0.8 x 6,528 = 6,506.4 -> 165,028 ->
    # 164,992; MIN 164,992; swa int(131,993.6) -> 131,968
    plan = _plan(_config(tmp_path), pp=2)
    assert plan.sglang is not None
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (164_992, 131_968)


def test_blackwell_auto_is_fp8_with_the_raw_latent(tmp_path: Path) -> None:
    # cell = 3 x 708 + 0.8 x 5 x 1,088 = 2,124 + 4,352 = 6,476 -> 165,803 -> 165,760;
    # swa int(132,608.0) = 132,608 (a whole number of pages)
    plan = _plan(_config(tmp_path), gpu="B200")
    assert plan.kv_dtype == "fp8_e4m3"
    assert plan.sglang is not None
    assert plan.sglang.cell_size_bytes == 3 * 708
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (165_760, 132_608)


def test_hopper_fp8_keeps_the_scaled_latent(tmp_path: Path) -> None:
    # cell = 3 x 788 + 4,352 = 6,716 -> 159,878 -> 159,872; swa int(127,897.6) -> 127,872
    plan = _plan(_config(tmp_path), kv_dtype="fp8_e4m3", page_size=1)
    assert plan.sglang is not None
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (159_872, 127_872)
    assert any("page_size 64" in note for note in plan.notes)


def test_multimodal_reservation_comes_out_of_the_budget(tmp_path: Path) -> None:
    # kv_cache_configurator.py line 3038: rest - SGLANG_VLM_CACHE_SIZE_MB (100 MiB; environ.py
    # line 1598) for a multimodal architecture; none with language_model_only
    plans = [
        make_plan(
            PlanRequest(
                model=_config(tmp_path, language_model_only=lm_only),
                engine="sglang",
                gpu="H200",
                max_model_len=4096,
            )
        )
        for lm_only in (None, True)
    ]
    rests = []
    for plan in plans:
        rank = plan.ranks[0]
        rests.append(
            rest_memory_bytes(
                total_free_bytes=plan.gpu.memory_bytes - CUDA_CONTEXT_BYTES,
                weights_bytes=rank.weights.num_bytes,
                other_bytes=rank.non_torch.num_bytes,
                mem_fraction_static=rank.gpu_memory_utilization,
            )
        )
    assert plans[0].available_kv_bytes == rests[0] - 100 * MiB
    assert plans[1].available_kv_bytes == rests[1]


def test_an_swa_pool_below_one_window_is_sglangs_error(tmp_path: Path) -> None:
    # 2 MiB: 2,097,152 // 12,556 = 167 -> 128 full; swa int(102.4) -> 64 <= 127 + 64
    plan = _plan(_config(tmp_path), kv_cache_memory_bytes=2 * MiB)
    assert not plan.fits
    assert plan.error is not None
    assert plan.error.startswith("SWA pool (64 tokens) cannot hold even one request")


def _one_line(error: KvbudgetError, *words: str) -> None:
    text = str(error)
    assert "\n" not in text
    for word in words:
        assert word in text


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"kv_dtype": "float16"}, ("kv_dtype", "overrides.py line 544", "bfloat16 or fp8_e4m3")),
        ({"tp": 3}, ("tp: 3", "modeling.py line 585")),
        ({"engine_version": "0.5.4"}, ("engine_version: 0.5.4", "--engine-version 0.5.23")),
    ],
)
def test_settings_sglang_refuses(
    tmp_path: Path, extra: dict[str, Any], words: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as caught:
        _plan(_config(tmp_path), **extra)
    _one_line(caught.value, *words)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"swa_num_key_value_heads": None}, ("swa_num_key_value_heads: 32", "lines 586-589")),
        ({"index_kpool": 2}, ("index_kpool: 2", "dots_hybrid_backend.py lines 367-371")),
        ({"index_topk": None}, ("index_topk: absent", "modeling.py lines 612-617")),
        ({"layer_types": ["full_attention"] * 8}, ("layer_types", "pool_configurator.py")),
        (
            {"layer_types": ["indexed_attention"] * 2 + DOTS3["layer_types"][2:]},
            ("layer_types", "modeling.py line 568"),
        ),
    ],
)
def test_configs_sglang_cannot_serve(
    tmp_path: Path, changes: dict[str, Any], words: tuple[str, ...]
) -> None:
    path = _config(tmp_path, **changes)
    with pytest.raises(LayoutNotApplicable) as caught:
        _plan(path)
    _one_line(caught.value, *words)
    calc = calc_model(path, tokens=100, engine="sglang")
    assert calc.status == "not_applicable"
    assert str(caught.value) in calc.reasons[0]
