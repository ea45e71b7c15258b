"""SGLang's DeepSeek-V4 pools (``DeepSeekV4TokenToKVPool`` sized by ``DSV4PoolConfigurator``).

Every expected number is worked by hand below from SGLang's own source, the sglang 0.5.23 wheel
from PyPI (``sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl``, paths under ``sglang/``),
on the default CUDA path for ``model_type`` ``deepseek_v4``:

* ``srt/arg_groups/model_overrides/deepseek_v4.py`` lines 43-61: ``swa_full_tokens_ratio`` 0.1
  when not given, ``page_size = 256`` on CUDA (a declaration: it beats ``--page-size``,
  ``srt/arg_groups/overrides.py`` lines 178-192); ``srt/arg_groups/deepseek_v4_hook.py`` lines
  45-60 (``dsv4_attn_backend`` auto is ``flashmla`` unless deepseek_v41) and 137-146
  (``max_running_requests`` 256 when not given); ``srt/arg_groups/overrides.py`` lines 892-913
  (kv dtype ``auto`` -> ``fp8_e4m3``; only ``fp8_e4m3`` / ``bfloat16`` pass).
* ``kernels/ops/attention/dsv4/kv_layout.py`` lines 50-105: the ``v4`` row is 576 data + 8 scale
  bytes = 584 B, a page of ``n`` rows ``ceil(n * 584 / 576) * 576`` B:
  256 rows -> ceil(149,504 / 576) = 260 x 576 = 149,760 B (585 B per row);
  64 rows -> ceil(37,376 / 576) = 65 x 576 = 37,440 B (585 B per row);
  2 rows -> ceil(1,168 / 576) = 3 x 576 = 1,728 B (864 B per row).
  ``SGLANG_DSV4_KV_LAYOUT`` defaults to ``v4`` (``srt/environ.py`` line 1754) and the compressed
  pools keep it (``srt/mem_cache/deepseek_v4_memory_pool.py`` lines 174-196).
* ``srt/mem_cache/deepseek_v4_memory_pool.py`` lines 53-57: an indexer row is ``128 + 128 // 128
  * 4`` = 132 B (fp8 + a float32 scale); lines 60-80: compressor-state rings of 8 rows (ratio 4)
  and 128 rows (ratio 128) without speculative decoding.
* ``srt/model_executor/pool_configurator.py``: c4 state row ``2*2*512*4 + 2*2*128*4`` = 8,192 +
  2,048 = 10,240 B (lines 1378-1381, float32: ``SGLANG_DSV4_COMPRESS_STATE_DTYPE``,
  ``srt/environ.py`` line 1832), priced per SWA token at ``8 / 256`` (line 1383); c128 state row
  ``2 * 512 * 4`` = 4,096 B, ``ceil((slots * 128 + 128 + 1) / 128) * 128`` rows per layer with
  ``slots = max_running_requests + 1`` (lines 1504-1528); ``bytes_per_full_token`` (lines
  1390-1446) and the token count (lines 1638-1669, 1463-1502; ``validate_swa_pool_size`` lines
  198-219); ``compute_swa_request_cap`` (lines 924-942): at most ``window + 128 + page`` SWA
  tokens per running request (``SGLANG_SWA_EVICTION_INTERVAL`` 128, ``srt/environ.py`` line 730).
* ``srt/configs/model_config.py`` lines 1419-1431: ``qk_nope_head_dim = head_dim - 64`` (448),
  ``window_size = sliding_window`` (128), ``compress_ratios`` per layer.

DeepSeek-V4-Flash: 43 layers, ``compress_ratios[:43]`` = 0, 0, then 4, 128 alternating to a 4 at
layer 42: 21 layers of ratio 4, 20 of ratio 128. DeepSeek-V4-Pro: 61 layers, 128, 128, then 4,
128 alternating to a 4 at layer 60: 30 of ratio 4, 31 of ratio 128.

scripts/check_sglang_dsv4_pool.py runs SGLang's own ``DSV4PoolConfigurator`` on these settings
and prints the same token counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.capacity.kvbytes import calc_model
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB
from tests.unit.spec.config_file import spec_from_config

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
PRO = "deepseek-ai/DeepSeek-V4-Pro"
KV_BYTES = 10 * GiB  # 10,737,418,240
SWA_PAGE = 149_760  # one layer's 256-token SWA page
C4_PAGE = 37_440 + 64 * 132  # 64 compressed rows + 64 indexer keys = 45,888
C128_PAGE = 1_728  # 2 compressed rows
C4_STATE_ROW = 10_240
C128_RING = 128 * 4_096  # 524,288 per request per layer


def _plan(model_id: str = FLASH, kv_bytes: int = KV_BYTES, **extra: object) -> PlanResult:
    request = PlanRequest(
        model=model_id,
        engine="sglang",
        gpu="H200",
        tp=8,
        kv_cache_memory_bytes=kv_bytes,
        max_model_len=8192,
        **extra,  # type: ignore[arg-type]
    )
    return make_plan(request)


@pytest.mark.parametrize(
    ("tokens", "total"),
    [
        # 1 page, 1 SWA page: 149,760 x 43 + 45,888 x 21 + 1,728 x 20 + 1 x 8 x 10,240 x 21 +
        # 524,288 x 20 = 6,439,680 + 963,648 + 34,560 + 1,720,320 + 10,485,760
        (100, 19_643_968),
        # 4 pages, SWA min(1,024, 128 + 128 + 256 = 512) = 2 pages: 2 x 6,439,680 + 4 x 963,648 +
        # 4 x 34,560 + 2 x 1,720,320 + 10,485,760 = 12,879,360 + 3,854,592 + 138,240 + 3,440,640
        # + 10,485,760
        (1_000, 30_798_592),
        # 391 pages: 12,879,360 + 391 x 963,648 + 391 x 34,560 + 3,440,640 + 10,485,760
        # = 12,879,360 + 376,786,368 + 13,512,960 + 13,926,400
        (100_000, 417_105_088),
    ],
)
def test_calc_flash_by_hand(tokens: int, total: int) -> None:
    result = calc_model(FLASH, tokens=tokens, engine="sglang")
    assert result.kv_dtype == "fp8_e4m3"
    assert result.block_size == 256
    assert result.total_bytes == total
    four = calc_model(FLASH, tokens=tokens, seqs=4, engine="sglang", tp=8)
    assert four.per_rank_max_bytes == 4 * total  # the latent is not split by TP


def test_calc_flash_groups_by_hand() -> None:
    groups = {g["kind"]: g for g in calc_model(FLASH, tokens=1_000, engine="sglang").groups}
    swa, c4, c128 = groups["sliding"], groups["compressed_sparse"], groups["heavily_compressed"]
    assert swa["tokens_kept"] == 512
    assert swa["bytes_per_sequence"] == 2 * SWA_PAGE * 43 == 12_879_360
    assert c4["tokens_kept"] == 256  # 1,024 // 4
    assert c4["bytes_per_sequence"] == 4 * C4_PAGE * 21 == 3_854_592
    assert c128["tokens_kept"] == 8  # 1,024 // 128
    assert c128["bytes_per_sequence"] == 4 * C128_PAGE * 20 == 138_240
    state = 2 * 8 * C4_STATE_ROW * 21 + C128_RING * 20
    assert groups["compressor_state"]["bytes_per_sequence"] == state == 13_926_400


def test_calc_pro_by_hand() -> None:
    # 2 x 149,760 x 61 + 4 x 45,888 x 30 + 4 x 1,728 x 31 + 2 x 8 x 10,240 x 30 + 524,288 x 31
    # = 18,270,720 + 5,506,560 + 214,272 + 4,915,200 + 16,252,928
    result = calc_model(PRO, tokens=1_000, engine="sglang")
    assert result.total_bytes == 45_159_680
    bf16 = calc_model(PRO, tokens=1_000, engine="sglang", kv_dtype="bfloat16")
    assert bf16.kv_dtype == "bfloat16"
    assert bf16.total_bytes == 45_159_680  # the same v4 rows (uint8 pool, fixed 584 B row)


def test_plan_flash_pool_by_hand() -> None:
    # per SWA token: 585 x 43 + 8 / 256 x 10,240 x 21 = 25,155 + 6,720 = 31,875
    # per full token: 0.1 x 31,875 + (585 / 4 + 132 / 4) x 21 + 864 / 128 x 20
    #   = 3,187.5 + 3,764.25 + 135 = 7,086.75
    # c128 rings: ceil((257 x 128 + 129) / 128) = 259 x 128 = 33,152 rows x 4,096 x 20
    #   = 2,715,811,840 B
    # (10,737,418,240 - 2,715,811,840) / 7,086.75 = 1,131,916.1 -> 4,421 pages = 1,131,776
    plan = _plan()
    assert plan.sglang is not None
    assert plan.kv_dtype == "fp8_e4m3"
    assert plan.sglang.page_size == 256
    assert plan.sglang.max_total_num_tokens == 1_131_776
    assert plan.num_blocks == 4_421
    assert plan.sglang.cell_size_bytes == 7_087  # 7,086.75 rounded up
    # swa: int(113,177.6) = 113,177 -> 442 pages = 113,152; c4 1,131,776 // 4 = 282,944;
    # c128 // 128 = 8,842; c4 state 442 x 8 = 3,536
    assert plan.sglang.swa_tokens == 113_152
    assert plan.sglang.log_line == (
        "DSV4 pool sizes: full=1131776, swa=113152, c4=282944, c128=8842, c4_state=3536, "
        "c128_state=0"
    )
    assert plan.sglang.max_running_requests == 256  # min(256, 1,131,776 // 2)
    assert plan.fits


def test_plan_pro_pool_by_hand() -> None:
    # per SWA token: 585 x 61 + 8 / 256 x 10,240 x 30 = 35,685 + 9,600 = 45,285
    # per full token: 4,528.5 + 179.25 x 30 + 6.75 x 31 = 4,528.5 + 5,377.5 + 209.25 = 10,115.25
    # c128 rings: 33,152 x 4,096 x 31 = 4,209,508,352 B
    # (10,737,418,240 - 4,209,508,352) / 10,115.25 = 645,353.4 -> 2,520 pages = 645,120
    plan = _plan(PRO)
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 645_120
    assert plan.sglang.swa_tokens == 64_512  # int(64,512.0) -> 252 pages


def test_plan_requested_running_requests_and_ratio() -> None:
    # 64 requests: ceil((65 x 128 + 129) / 128) = 67 x 128 = 8,576 rows x 4,096 x 20
    # = 702,545,920 B; (10,737,418,240 - 702,545,920) / 7,086.75 = 1,415,998.9 -> 1,415,936
    plan = _plan(max_num_seqs=64)
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 1_415_936
    assert plan.sglang.max_running_requests == 64
    # ratio 0.2: 0.2 x 31,875 + 3,764.25 + 135 = 10,274.25 per token;
    # 8,021,606,400 / 10,274.25 = 780,748.9 -> 3,049 pages = 780,544
    ratio = _plan(swa_full_tokens_ratio=0.2)
    assert ratio.sglang is not None
    assert ratio.sglang.max_total_num_tokens == 780_544
    assert ratio.sglang.swa_full_tokens_ratio == 0.2


def test_plan_caps_and_page_size_override() -> None:
    capped = _plan(max_total_tokens=100_000, page_size=64)  # 390 pages of 256
    assert capped.sglang is not None
    assert capped.sglang.max_total_num_tokens == 99_840
    assert capped.sglang.page_size == 256
    assert any("page_size 256" in note for note in capped.notes)


def test_plan_pipeline_stages_take_the_smaller_pool() -> None:
    # 43 layers over 2 stages by SGLang's split (0.5.23 distributed/utils.py lines 137-148: the
    # last 43 % 2 = 1 stage takes the extra layer; 0.5.4's lines 86-91 give the same here):
    # [0, 21) and [21, 43). Until this commit the test used vLLM's split ([0, 22), [22, 43)),
    # wrong for SGLang. Stage 1: 22 layers, ratio 4 at 22..42 (11), ratio 128 at 21..41 (11):
    # per SWA token 585 x 22 + 320 x 11 = 16,390; per full token 0.1 x 16,390 = 1,639 +
    # 179.25 x 11 + 6.75 x 11 = 3,685.0; rings 33,152 x 4,096 x 11 = 1,493,696,512;
    # (10,737,418,240 - 1,493,696,512) / 3,685 = 2,508,472.6 -> // 256 x 256 = 2,508,288.
    # Stage 0 (21 layers, ratio 4 x 10, 128 x 9: 1,548.5 + 1,792.5 + 60.75 = 3,401.75 B per
    # token, rings x 9) holds 2,797,178.6 -> 2,797,056: MIN is stage 1. SGLang's own
    # DSV4PoolConfigurator prints both (scripts/check_sglang_dsv4_pool.py, stages 0 and 1).
    plan = _plan(pp=2)
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 2_508_288
    assert plan.sglang.cell_size_bytes == 3_685


def test_swa_pool_too_small_is_sglangs_error() -> None:
    # rings 2,715,811,840 + 4,096 tokens x 7,087: 29,028,352 / 7,086.75 = 4,096.1 -> 4,096;
    # swa int(409.6) = 409 -> 256, not above window 128 + page 256
    plan = _plan(kv_bytes=2_715_811_840 + 4_096 * 7_087)
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 4_096
    assert not plan.fits
    assert plan.error is not None
    assert plan.error.startswith("SWA pool (256 tokens) cannot hold even one request")


def test_kv_dtype_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"kv_dtype: 'float16'.*overrides.py lines 907-910"):
        _plan(kv_dtype="float16")
    spec = resolve_model(FLASH).spec
    assert spec is not None
    with pytest.raises(ConfigError, match="fp8_e4m3 or bfloat16"):
        sglang_layout(spec, tokens=100, seqs=1, kv_dtype="fp8_e5m2")


def test_deepseek_ref_refused_in_one_line() -> None:
    """SGLang registers its DeepSeek-V4 config class for model_type deepseek_v4 only
    (srt/utils/hf_transformers/common.py line 224); kvbudget models that path."""
    spec = resolve_model("sgl-project/DeepSeek-V4-Flash-FP8").spec
    assert spec is not None
    with pytest.raises(LayoutNotApplicable) as info:
        sglang_layout(spec, tokens=100, seqs=1)
    message = str(info.value)
    assert "\n" not in message
    assert "model_type: 'deepseek_ref'" in message
    assert "hf_transformers/common.py line 224" in message


def test_head_dim_other_than_the_v4_row_is_refused(tmp_path: Path) -> None:
    """The v4 row is 448 fp8 NoPE + 64 bf16 RoPE (deepseek_v4_memory_pool.py lines 340-345)."""
    raw = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8"))
    raw["head_dim"] = 256
    with pytest.raises(LayoutNotApplicable, match=r"head_dim: \[256\].*lines 340-345"):
        sglang_layout(spec_from_config(tmp_path, raw), tokens=100, seqs=1)
