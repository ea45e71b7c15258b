"""SGLang's DeepSeek-V4 pools with its NEXTN (EAGLE) drafter (``--speculative-config`` mtp).

Worked by hand from the sglang 0.5.23 source (paths under ``sglang/srt/``), on the default CUDA
path of ``test_plan_sglang_dsv4.py`` (its constants: 585 B per SWA row, 45,888 B per c4 page of
64 rows, 864 B per c128 row, c4 state row 10,240 B, c128 state row 4,096 B), with the drafter:

* ``mem_cache/deepseek_v4_memory_pool.py`` lines 60-91: the compressor-state rings are 16 rows
  (ratio 4) and 256 rows (ratio 128) with speculative decoding, not 8 and 128.
* ``model_executor/pool_configurator.py`` lines 1250-1257: ``bytes_per_full_token`` (and the
  SWA one) times ``(layers + 1) / layers``, one draft layer; lines 1291-1307: the rings must
  serve ``speculative_num_draft_tokens`` (``ring - 8 + 2`` = 10 for ratio 4,
  ``get_compress_state_write_pad`` lines 118-122), else SGLang's assertion.
* ``arg_groups/deepseek_v4_hook.py`` lines 148-158 and ``arg_groups/speculative_hook.py`` lines
  1159-1163, 1255-1268: SGLang runs it as EAGLE with ``--speculative-eagle-topk 1`` given, so
  with ``--speculative-num-steps``; ``num_speculative_tokens`` k is ``k`` steps, ``k + 1`` draft
  tokens.
  ``arg_groups/deepseek_v4_hook.py`` lines 137-146 declare ``max_running_requests`` 256 before
  the speculative hook (``arg_groups/pipeline.py`` lines 225, 306), whose 48 applies only when
  none is set (``speculative_hook.py`` lines 1086-1094).
* ``models/deepseek_v4_nextn.py`` line 53 and ``mem_cache/kv_cache_configurator.py`` lines
  546-556, 2072-2081: the drafter's own pool is one ratio-0 layer of SWA pages for the target's
  ``swa`` tokens, ``swa // 256 + 1`` pages of 149,760 B (``deepseek_v4_memory_pool.py`` lines
  165-169, 279-291).

scripts/check_sglang_dsv4_pool.py runs SGLang's own ``DSV4PoolConfigurator`` with
``speculative_algorithm`` EAGLE and 4 draft tokens and prints the same token counts (and the
assertion at 11 draft tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.capacity.engines.sglang.dsv4_spec import dsv4_drafter_layer_bytes
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
PRO = "deepseek-ai/DeepSeek-V4-Pro"
MTP = '{"method": "mtp", "num_speculative_tokens": 3}'


def _plan(model_id: str = FLASH, speculative: str | None = MTP, **extra: object) -> PlanResult:
    request = PlanRequest(
        model=model_id,
        engine="sglang",
        tp=8,
        max_model_len=8192,
        speculative_config=speculative,
        **{"gpu": "H200", "kv_cache_memory_bytes": 10 * GiB, **extra},  # type: ignore[arg-type]
    )
    return make_plan(request)


def test_flash_pool_with_the_drafter_by_hand() -> None:
    # per SWA token: 585 x 43 + 16 / 256 x 10,240 x 21 = 25,155 + 13,440 = 38,595
    # per full token: 0.1 x 38,595 + 3,764.25 + 135 = 7,758.75, x 44 / 43 = 7,939.19
    # c128 rings: ceil((257 x 256 + 256 + 1) / 128) = 517 x 128 = 66,176 rows x 4,096 x 20
    #   = 5,421,137,920 B
    # (10,737,418,240 - 5,421,137,920) / 7,939.19 = 669,620.2 -> 2,615 pages = 669,440
    plan = _plan()
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 669_440
    assert plan.sglang.cell_size_bytes == 7_940  # 7,939.19 rounded up
    # swa int(66,944.0) -> 261 pages = 66,816; c4 669,440 // 4; c128 // 128; c4 state 261 x 16
    assert plan.sglang.swa_tokens == 66_816
    assert plan.sglang.log_line == (
        "DSV4 pool sizes: full=669440, swa=66816, c4=167360, c128=5230, c4_state=4176, c128_state=0"
    )
    # DeepSeek-V4's 256 stands (declared before the speculative hook's 48)
    assert plan.sglang.max_running_requests == 256
    # the drafter's own pool: (261 + 1) x 149,760 = 39,237,120 B
    assert any("39,237,120 B per GPU" in note for note in plan.notes)
    assert plan.fits


def test_pro_pool_with_the_drafter_by_hand() -> None:
    # per SWA token: 585 x 61 + 16 / 256 x 10,240 x 30 = 35,685 + 19,200 = 54,885
    # per full token: 5,488.5 + 5,377.5 + 209.25 = 11,075.25, x 62 / 61 = 11,256.81
    # c128 rings: 66,176 x 4,096 x 31 = 8,402,763,776 B
    # (10,737,418,240 - 8,402,763,776) / 11,256.81 = 207,400.7 -> 810 pages = 207,360
    plan = _plan(PRO)
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 207_360
    assert plan.sglang.swa_tokens == 20_736  # int(20,736.0) -> 81 pages


def test_requested_running_requests_with_the_drafter() -> None:
    # 64 requests: ceil((65 x 256 + 257) / 128) = 133 x 128 = 17,024 rows x 4,096 x 20
    # = 1,394,606,080 B; 9,342,812,160 / 7,939.19 = 1,176,797.6 -> 4,596 pages = 1,176,576
    plan = _plan(max_num_seqs=64)
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 1_176_576
    assert plan.sglang.max_running_requests == 64
    assert plan.sglang.log_line.endswith("c4_state=7344, c128_state=0")  # 459 SWA pages x 16


def test_any_engine_version_and_no_default_steps() -> None:
    """DeepSeek-V4 is read in 0.5.23 whatever the version. Without num_speculative_tokens there
    is no launch to read: SGLang's DeepSeek-V4 hook asserts top-k 1 (deepseek_v4_hook.py lines
    148-158) before the speculative hook would pick (3, 1, 4), and a top-k needs the steps."""
    plan = _plan(engine_version="0.5.4")
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 669_440
    assert any("--speculative-num-steps 3 --speculative-eagle-topk 1" in n for n in plan.notes)
    with pytest.raises(ConfigError) as info:
        _plan(speculative='{"method": "mtp"}')
    message = str(info.value)
    assert "\n" not in message
    assert (
        "'Only EAGLE speculative algorithm with topk == 1 is supported for "
        "DeepseekV4ForCausalLM'" in message
    )


def test_too_many_draft_tokens_is_sglangs_assertion() -> None:
    """num_speculative_tokens 10: 11 draft tokens, more than the c4 ring's 16 - 8 + 2 = 10."""
    with pytest.raises(ConfigError) as info:
        _plan(speculative='{"method": "mtp", "num_speculative_tokens": 10}')
    message = str(info.value)
    assert "\n" not in message
    assert (
        "'speculative_num_draft_tokens=11 exceeds what the c4 compress state ring can keep "
        "resident (ring_size=16 serves at most 10 draft tokens)." in message
    )
    assert "pool_configurator.py lines 1291-1307" in message
    nine = _plan(speculative='{"method": "mtp", "num_speculative_tokens": 9}')
    assert nine.sglang is not None and nine.sglang.max_total_num_tokens == 669_440


@pytest.mark.parametrize(
    ("model_id", "drafter"),
    [
        # 2 x ceil(129,280 / 8) x 4,096 x 2 = 264,765,440 (embed_tokens, lm_head) + vLLM's
        # layer 488,947,500 + SGLang's float32 block scales, 3 B more for each of the 3,392
        # 128 x 128 blocks of its fp8 linears (fp8.py lines 674-680): wqkv_a 32 x 12, wq_b 8 x 32,
        # wo_a 32 x 8, wo_b 8 x 32, shared 32 x 4 + 2 x 32, e_proj / h_proj 2 x 32 x 32
        (FLASH, 264_765_440 + 488_947_500 + 3 * 3_392),
        # 2 x 16,160 x 7,168 x 2 = 463,339,520 + vLLM's layer, 2,595,640,932 - 268,435,456
        # (rope) - 469,762,048 (vLLM's hidden buffer) = 1,857,443,428; + 3 B for each of 9,848
        # blocks (wqkv_a 56 x 16, wq_b 12 x 64, wo_a 32 x 16, wo_b 16 x 56, shared 56 x 6 + 3 x
        # 56, e_proj / h_proj 2 x 56 x 56); + 256 B of sinks (all 128 heads, deepseek_v4.py line
        # 1092, where vLLM pads 16 to 64); + its own ratio-0 freqs_cis, 1,048,576 x 32 complex64,
        # and get_rope cos_sin_cache, 1,048,576 x 64 fp32: 2 x 268,435,456
        (PRO, 463_339_520 + 1_857_443_428 + 3 * 9_848 + 256 + 2 * 268_435_456),
    ],
)
def test_drafter_weights_join_the_target_before_sizing(model_id: str, drafter: int) -> None:
    """The drafter loads before the pool is sized: its own embed_tokens and lm_head
    (``models/deepseek_v4_nextn.py`` lines 67-72, 275-281), each ``ceil(vocab / 8) x hidden x
    2``, plus its layer at TP 8 as ``test_plan_mtp_weights_vllm.test_deepseek_v4_mtp_weights_by_
    hand`` works it out (the modules SGLang's DeepseekV4ModelNextN builds under the same names),
    with SGLang's differences (``test_plan_dsv4_weights_sglang``: float32 block scales, every
    head's sink, the ``get_rope`` table).
    Pro has no ratio-0 target layer, so the drafter's ``freqs_cis`` (``precompute_freqs_cis``
    behind ``lru_cache(2)``, ``kernels/ops/attention/dsv4/rope.py`` lines 27-68; registered at
    ``models/deepseek_v4.py`` lines 1171-1200) is a table of its own; Flash's layers 0 and 1
    already built that one."""
    without = _plan(model_id, speculative=None, kv_cache_memory_bytes=None)
    with_draft = _plan(model_id, kv_cache_memory_bytes=None)
    extra = with_draft.weights.per_rank_bytes[0] - without.weights.per_rank_bytes[0]
    assert extra == drafter
    assert with_draft.available_kv_bytes == without.available_kv_bytes - extra


def _config_plan(tmp_path: Path, **fields: object) -> PlanResult:
    raw = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw, **fields}), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    request = PlanRequest(
        model=str(path),
        engine="sglang",
        gpu="H200",
        tp=8,
        max_model_len=8192,
        kv_cache_memory_bytes=10 * GiB,
        speculative_config=MTP,
    )
    return make_plan(request, resolved.spec)


def test_one_draft_layer_whatever_the_checkpoint_says(tmp_path: Path) -> None:
    """SGLang rewrites the draft config to DeepseekV4ForCausalLMNextN with
    num_nextn_predict_layers 1 (configs/model_config.py lines 1041-1061) and inflates by one
    layer (pool_configurator.py line 1253): 2 gives Flash's 669,440 tokens; 0 has no mtp.0."""
    two = _config_plan(tmp_path, num_nextn_predict_layers=2)
    assert two.sglang is not None
    assert two.sglang.max_total_num_tokens == 669_440
    with pytest.raises(ConfigError, match=r"num_nextn_predict_layers 0.*mtp\.0 layer"):
        _config_plan(tmp_path, num_nextn_predict_layers=0)


def test_unsized_drafter_part_is_named() -> None:
    """The NVFP4 checkpoint's drafter experts are a part kvbudget's DeepSeek-V4 MTP estimate
    does not size: refused in one line naming them (a --weights-bytes figure is taken as is)."""
    with pytest.raises(ConfigError) as info:
        _plan("nvidia/DeepSeek-V4-Flash-NVFP4", kv_cache_memory_bytes=None)
    message = str(info.value)
    assert "\n" not in message
    assert "its routed experts" in message
    held = _plan("nvidia/DeepSeek-V4-Flash-NVFP4", weights_bytes=100 * GiB)
    assert held.sglang is not None
    # --kv-cache-memory sets the pool: the same 669,440 tokens as Flash, the drafter left out
    # of the weights shown (said in a note)
    pool = _plan("nvidia/DeepSeek-V4-Flash-NVFP4")
    assert pool.sglang is not None and pool.sglang.max_total_num_tokens == 669_440
    assert any("weights leave the NextN drafter out" in note for note in pool.notes)


def test_the_drafters_experts_split_over_tp_as_the_targets() -> None:
    """SGLang's FusedMoE splits the routed experts' rows over ``moe_tp_size = tp_size //
    moe_ep_size // moe_dp_size`` (``runtime_context.py`` line 154; ``layers/moe/fused_moe_triton/
    layer.py`` lines 390-392, 427-428) for the NextN layer as for the target's, not over vLLM's
    ``tp x dp``: at TP 8 a data-parallel 4 request gives Flash's drafter layer the same
    2,048 / 8 = 256 rows per rank, the bytes worked out in
    ``test_drafter_weights_join_the_target_before_sizing`` (vLLM's layer 488,947,500 + 3 B for
    each of its 3,392 fp8 blocks), where ``tp x dp`` = 32 would leave 64 rows, no whole
    128-row MXFP4 block (an unsized part)."""
    model = resolve_model(FLASH).spec
    assert model is not None
    request = PlanRequest(model=FLASH, engine="sglang", tp=8, data_parallel_size=4)
    assert dsv4_drafter_layer_bytes(request, model) == 488_947_500 + 3 * 3_392 == 488_957_676


def test_the_drafters_mxfp4_experts_follow_the_gpu_as_the_targets() -> None:
    """On compute capability 8 (A100) SGLang builds MXFP4 experts with Fp8MoEMethod's float32
    scales, not flashinfer_mxfp4's e8m0 (arg_groups/model_overrides/deepseek_v4.py lines 76-87):
    the target keeps the generic count with a note, and the drafter is not sized either, so a
    plan without the pool or the weights given is refused naming it; on an H200 it is sized."""
    with pytest.raises(ConfigError) as info:
        _plan(gpu="A100-80GB", kv_cache_memory_bytes=None)
    message = str(info.value)
    assert "\n" not in message
    assert "MXFP4 routed experts on compute capability 8" in message
    pool = _plan(gpu="A100-80GB")
    assert any("weights leave the NextN drafter out" in note for note in pool.notes)
    h200 = _plan()
    assert not any("weights leave the NextN drafter out" in note for note in h200.notes)
