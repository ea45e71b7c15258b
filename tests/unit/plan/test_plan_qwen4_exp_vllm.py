"""vLLM 0.32's pool for Qwen4-Exp (GDN + QSA, PLE states), worked by hand from vLLM's source.

Qwen4-Exp does not start on vLLM's CPU build (``models/qwen4_exp/__init__.py`` lines 30-31: "CUDA
and ROCm only"), so there is no engine log: every figure below is hand arithmetic from vLLM
0.32.0's source (``site-packages/vllm/``), and ``scripts/check_qwen4_exp_vllm_groups.py`` ran
vLLM's own ``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups`` /
``get_max_concurrency_for_kv_cache_config`` on specs built from the same lines; it printed the
same block sizes, pages, block counts and concurrencies.

The model is the tiny Qwen4-Exp of ``tests/unit/spec/test_dots3_qwen4.py`` (4 layers: linear,
linear, linear, indexed; 1 KV head of 32; GDN 2 key / 4 value heads of 16, conv kernel 4; QSA
``indexer_head_dim`` 32, ``indexer_compress_ratio`` 4; bfloat16). Per layer:

* GDN state (``models/qwen4_exp/nvidia/model.py`` lines 829-848, ``mamba_utils.py``
  ``gated_delta_net_state_shape``): conv ``[16*2*2 + 16*4 = 128, 4 - 1 = 3]``, temporal
  ``[4, 16, 16]``, both bf16 (no ``mamba_ssm_dtype`` in the config: ``models/config.py`` lines
  853-878, ``mamba_utils.py`` ``_mamba_state_dtype``): (384 + 1,024) x 2 = 2,816 B.
* PLE state (``model.py`` lines 797-816; ``ple_layer_ids`` [1, 3]: layers 0 and 2): ``[hc_count 4
  x hidden 64 = 256, (4 - 1) x ngram 3 = 9]`` bf16 = 4,608 B, never split by TP.
* QSA attention (``nvidia/qsa.py`` lines 543-551): ``FullAttentionSpec(1 head, 32, 32)`` bf16:
  128 B per token.
* QSA raw-key ring (``common/qsa_cache.py`` lines 844-862): ``CircularBufferSpec(block_size =
  4 x cdiv(4 + 0, 4) = 4, 1 head, 32, head_size_v 0)`` bf16: 4 x 32 x 2 = 256 B, one per request.
* QSA compressed keys (``qsa_cache.py`` lines 868-876): ``MLAAttentionSpec(B, 1 head, 32,
  tokens_per_state 4)`` bf16: ``B / 4`` rows x 64 B (``v1/kv_cache_interface.py`` lines 227-234,
  549-553).

Block size (``platforms/interface.py`` lines 1044-1091): ``16 x cdiv(max state page, 16 x 128)``;
the states are padded to ``B x 128`` (lines 1105-1116). Groups (``v1/core/kv_cache_utils.py``
``_get_packed_kv_cache_groups`` lines 1860-1994; block-outermost layout: ``qsa_cache.py`` lines
753-756): the QSA layers' K/V and compressed keys form one group; the rings one; each GDN / PLE
bucket splits into ``max(cdiv(n, repeats), cdiv(n, anchor // state page))`` groups.
``num_blocks = available // widest group page`` (lines 1520-1551, 1627); a request of L tokens
needs ``cdiv(L, B)`` attention blocks, 1 ring block and per state group 1 block (mode ``none``)
or 2 (``align``, vLLM 0.32's default with prefix caching: ``MambaSpec.max_memory_usage_bytes``,
``v1/kv_cache_interface.py`` lines 1076-1082); concurrency = num_blocks / that sum (lines
1195-1227), tokens ``int(concurrency x L)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.capacity.layouts.vllm_qwen4 import qwen4_layer_specs
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB
from tests.unit.config_files import write_config
from tests.unit.spec.test_dots3_qwen4 import _qwen4

#: the tiny Qwen4-Exp of the hf-layout test (its QSA indexer fields set), one config for both
QWEN4: dict[str, Any] = {**_qwen4(), "vocab_size": 1000}
GDN_PAGE = (128 * 3 + 4 * 16 * 16) * 2  # 2,816
PLE_PAGE = 4 * 64 * 9 * 2  # 4,608
PER_TOKEN = 1 * (32 + 32) * 2  # 128
RING_PAGE = 4 * 32 * 2  # 256
LEN = 8192


def _config(tmp_path: Path, **changes: Any) -> str:
    return write_config(tmp_path, QWEN4, **changes)


def _plan(model: str, **extra: Any) -> PlanResult:
    fields: dict[str, Any] = {
        "model": model,
        "engine": "vllm",
        "engine_version": "0.32.0",
        "gpu": "H200",
        "kv_cache_memory_bytes": 1 * GiB,
        "max_model_len": LEN,
        "max_num_batched_tokens": LEN,
        **extra,
    }
    return make_plan(PlanRequest(**fields))


def test_specs_worked_from_the_source(tmp_path: Path) -> None:
    """B = 16 x cdiv(2,816, 16 x 128) = 32: attention page 32 x 128 = 4,096 B, the GDN pages
    padded to it, compressed keys 32 / 4 x 32 x 2 = 512 B."""
    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    block, specs = qwen4_layer_specs(spec)
    assert block == 32
    got = [(s.layer_index, s.role, s.block_size, s.page_size_bytes) for s in specs]
    gdn = [(i, "gdn", 32, 4096) for i in range(3)]
    assert got == [
        *gdn,
        (3, "ring", 4, RING_PAGE),
        (3, "compressed", 32, 512),
        (3, "attention", 32, 4096),
    ]


def test_tiny_pool_in_mamba_cache_mode_none(tmp_path: Path) -> None:
    """Groups: GDN 0 | GDN 1 | GDN 2 | ring | K/V + compressed (repeats = approximate_gcd([3, 1,
    1], lower bound 1) = 1; anchor 4,608 // 4,096 = 1 state per group). Widest page 4,096 + 512 =
    4,608: 1,073,741,824 // 4,608 = 233,016 blocks. Per request: 8,192 / 32 = 256 + 1 + 3 = 260:
    233,016 / 260 = 896.2154, int(x 8,192) = 7,341,796 tokens."""
    result = _plan(_config(tmp_path), mamba_cache_mode="none")
    assert result.block_size == 32
    got = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in result.groups]
    mamba = [("mamba", [i], 4096) for i in range(3)]
    assert got == [*mamba, ("ring", [3], RING_PAGE), ("full", [3], 4096 + 512)]
    assert result.num_blocks == GiB // 4608 == 233_016
    assert result.max_concurrency == pytest.approx(233_016 / 260)
    assert result.kv_cache_tokens == 7_341_796


def test_default_align_mode_holds_two_pages_per_state(tmp_path: Path) -> None:
    """vLLM 0.32 turns prefix caching on for hybrids, so mode align: 256 + 1 + 3 x 2 = 263 blocks
    per request: 233,016 / 263 = 885.99, 7,258,049 tokens."""
    result = _plan(_config(tmp_path))
    assert result.num_blocks == 233_016
    assert result.max_concurrency == pytest.approx(233_016 / 263)
    assert result.kv_cache_tokens == 7_258_049


def test_ple_states_raise_the_block(tmp_path: Path) -> None:
    """PLE on layers 0 and 2 (4,608 B > 2,816): B = 16 x cdiv(4,608, 2,048) = 48, page 6,144;
    groups PLE 0 | PLE 2 | GDN 0 | GDN 1 | GDN 2 | ring | K/V 6,144 + 48 / 4 x 64 = 768.
    1 GiB // 6,912 = 155,344 blocks; align: cdiv(8,192, 48) = 171 + 1 + 5 x 2 = 182 per
    request: 853.54, 6,992,187 tokens."""
    result = _plan(_config(tmp_path, ple_layer_ids=[1, 3], eos_token_id=1))
    assert result.block_size == 48
    pages = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in result.groups]
    ple = [("mamba", [0], 6144), ("mamba", [2], 6144)]
    gdn = [("mamba", [i], 6144) for i in range(3)]
    assert pages == [*ple, *gdn, ("ring", [3], RING_PAGE), ("full", [3], 6144 + 768)]
    assert result.num_blocks == GiB // 6912 == 155_344
    assert result.max_concurrency == pytest.approx(155_344 / 182)
    assert result.kv_cache_tokens == 6_992_187


def test_fp8_halves_the_kv_not_the_index_keys(tmp_path: Path) -> None:
    """fp8 (uint8 storage, ``qsa.py`` lines 460-468): 64 B per token, B = 16 x cdiv(2,816, 1,024)
    = 48; page 3,072 + compressed 12 x 64 = 768 (bf16: ``indexer_qsa.py`` lines 157-164) = 3,840:
    279,620 blocks; mode none: 171 + 1 + 3 = 175 per request."""
    result = _plan(_config(tmp_path), kv_dtype="fp8", mamba_cache_mode="none")
    assert result.block_size == 48
    assert result.groups[-1].page_size_bytes == 3840
    assert result.num_blocks == 279_620
    assert result.max_concurrency == pytest.approx(279_620 / 175)


def test_tensor_parallel_splits_gdn_not_the_kv_head(tmp_path: Path) -> None:
    """TP 2: 1 KV head stays 1 (replicated, ``qsa.py`` lines 390-396); GDN conv 64 x 3 + 2 x 16 x
    16 = 704 x 2 = 1,408 B: B = 16 x cdiv(1,408, 2,048) = 16, page 2,048, compressed 4 x 64 =
    256: 1 GiB // 2,304 = 466,033 blocks; none: 512 + 1 + 3 = 516 per request, 7,398,725 tokens."""
    result = _plan(_config(tmp_path), tp=2, mamba_cache_mode="none")
    assert result.block_size == 16
    assert result.num_blocks == GiB // 2304 == 466_033
    assert result.max_concurrency == pytest.approx(466_033 / 516)
    assert result.kv_cache_tokens == 7_398_725


def test_eight_layers_put_two_states_in_a_group(tmp_path: Path) -> None:
    """8 layers (LLLQ LLLQ): repeats = approximate_gcd([6, 2, 2], lower bound 2) = 2; anchor 2 x
    4,608 = 9,216 holds 2 states of 4,096: GDN groups {0, 4} {1, 5} {2, 6}, 8,192 B each; widest
    9,216: 116,508 blocks; none: 256 + 1 + 3 = 260 per request."""
    result = _plan(_config(tmp_path, num_hidden_layers=8), mamba_cache_mode="none")
    got = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in result.groups]
    assert got[:3] == [("mamba", [0, 4], 8192), ("mamba", [1, 5], 8192), ("mamba", [2, 6], 8192)]
    assert got[3:] == [("ring", [3, 7], 2 * RING_PAGE), ("full", [3, 7], 2 * 4608)]
    assert result.num_blocks == 116_508
    assert result.max_concurrency == pytest.approx(116_508 / 260)


def test_calc_vllm_layout_counts_every_cache(tmp_path: Path) -> None:
    """``calc --engine vllm``: 2 sequences of 100 tokens: cdiv(100, 32) = 4 blocks of 4,608 B, a
    256 B ring and 3 GDN pages of 4,096 B each: (18,432 + 256 + 12,288) x 2 = 61,952 B."""
    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    layout = vllm_layout(spec, tokens=100, seqs=2)
    assert layout.block_size == 32
    assert layout.total_bytes == (4 * 4608 + RING_PAGE + 3 * 4096) * 2 == 61_952


def test_calc_vllm_layout_splits_the_groups_by_stage(tmp_path: Path) -> None:
    """``calc --engine vllm --pp 2`` on 8 layers (groups of test_eight_layers_put_two_states_in_a
    _group, each projected onto a stage: ``_project_kv_cache_groups_to_worker``, lines
    2486-2528): stage 0 (layers 0-3) holds GDN 0, 1, 2 (4,096 B each), ring 3 (256 B) and K/V 3
    (4,608 B per block); stage 1 (4-7) the same; 2 sequences of 100 tokens: (4 x 4,608 + 256 +
    3 x 4,096) x 2 = 61,952 B per stage."""
    spec = resolve_model(_config(tmp_path, num_hidden_layers=8)).spec
    assert spec is not None
    layout = vllm_layout(spec, tokens=100, seqs=2, pp=2)
    assert [(s.layer_start, s.layer_end, s.bytes_per_rank) for s in layout.stages] == [
        (0, 4, 61_952),
        (4, 8, 61_952),
    ]
    kinds = [(g.kind, list(g.layer_indices)) for g in layout.stages[1].groups]
    assert kinds == [("mamba", [4]), ("mamba", [5]), ("mamba", [6]), ("ring", [7]), ("full", [7])]


def test_multimodal_ring_keeps_mrope_positions(tmp_path: Path) -> None:
    """``Qwen4ExpForConditionalGeneration`` keeps M-RoPE (``mrope_section``): each ring row is the
    key rounded to 4 bf16 plus 3 int64 positions (``qsa_cache.py`` lines 814-829): (32 + 12) x 2
    x 4 rows = 352 B."""
    text = {**QWEN4, "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6]}}
    wrapper = {
        "model_type": "qwen4_exp",
        "architectures": ["Qwen4ExpForConditionalGeneration"],
        "text_config": text,
        "vision_config": {},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapper), encoding="utf-8")
    spec = resolve_model(str(path)).spec
    assert spec is not None
    _block, specs = qwen4_layer_specs(spec)
    assert [s.page_size_bytes for s in specs if s.role == "ring"] == [(32 + 12) * 2 * 4]


def test_pipeline_stages_project_the_whole_model_groups(tmp_path: Path) -> None:
    """pp 2 on 8 layers (LLLQ LLLQ; no ple_layer_ids, so vLLM 0.32 takes PP: ``SupportsPP``,
    ``make_layers``, ``nvidia/model.py`` lines 446-448, 693-699): vLLM groups the merged specs of
    every worker as one model, then projects each group onto a worker's layers
    (``v1/core/kv_cache_utils.py`` ``get_kv_cache_configs`` lines 2566-2603,
    ``_project_kv_cache_groups_to_worker`` lines 2486-2528): the groups are pp 1's; stage 0 holds
    layers 0-3 (``distributed/utils.py`` ``get_pp_indices``: 8 / 2 = 4 each), so its widest
    projected group is K/V 4,096 + compressed 512 = 4,608 (GDN {0, 4} -> layer 0 only: 4,096):
    1 GiB // 4,608 = 233,016 blocks, stage 1 the same; every worker allocates the smallest
    (lines 2662-2678). Per request the scheduler counts every global group (lines 2276-2297,
    1195-1227): none 256 + 1 + 3 = 260, 896.2154."""
    result = _plan(_config(tmp_path, num_hidden_layers=8), mamba_cache_mode="none", pp=2)
    got = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in result.groups]
    assert got[:3] == [("mamba", [0, 4], 8192), ("mamba", [1, 5], 8192), ("mamba", [2, 6], 8192)]
    assert [(r.num_blocks, r.kv_pool_bytes) for r in result.ranks] == [
        (233_016, 233_016 * 4608),
        (233_016, 233_016 * 4608),
    ]
    assert result.num_blocks == 233_016
    assert result.max_concurrency == pytest.approx(233_016 / 260)


def test_each_stage_is_checked_on_its_own_projected_groups(tmp_path: Path) -> None:
    """vLLM 0.32 checks every worker's memory against its projected groups
    (``v1/core/kv_cache_utils.py`` lines 2638-2647; ``_max_memory_usage_bytes_from_groups``
    lines 2337-2366: bytes per block x the blocks a max-length request needs). 8 layers, 2,000,000
    B per GPU, mode none, 260 blocks per request: pp 1 needs 9,216 x 260 = 2,396,160 B, more than
    it has; pp 2 needs 4,608 x 260 = 1,198,080 B per stage, and holds 2,000,000 // 4,608 = 434
    blocks: 434 / 260 = 1.669 requests."""
    config = _config(tmp_path, num_hidden_layers=8)
    one = _plan(config, mamba_cache_mode="none", kv_cache_memory_bytes=2_000_000)
    assert not one.fits
    assert one.needed_bytes == 9216 * 260 == 2_396_160
    two = _plan(config, mamba_cache_mode="none", kv_cache_memory_bytes=2_000_000, pp=2)
    assert two.fits
    assert two.needed_bytes == 4608 * 260 == 1_198_080
    assert two.num_blocks == 434
    assert two.max_concurrency == pytest.approx(434 / 260)


def test_an_uneven_stage_holds_more_blocks_but_allocates_the_common_count(
    tmp_path: Path,
) -> None:
    """pp 3 on 8 layers: ``get_pp_indices`` gives [2, 2, 2] plus the remainder 2 on partitions
    -2 and -3 (``distributed/utils.py`` lines 154-158): [3, 3, 2], layers 0-2 | 3-5 | 6-7. Stage 0
    (GDN 0, 1, 2 only): widest 4,096, 1 GiB // 4,096 = 262,144 blocks; stage 1 (QSA 3, GDN 4, 5)
    and stage 2 (GDN 6, QSA 7): 4,608, 233,016; all allocate 233,016 (lines 2662-2678), stage 0
    re-planned at 233,016 x 4,096 B."""
    result = _plan(_config(tmp_path, num_hidden_layers=8), mamba_cache_mode="none", pp=3)
    assert [r.num_layers for r in result.ranks] == [3, 3, 2]
    assert [r.kv_pool_bytes for r in result.ranks] == [
        233_016 * 4096,
        233_016 * 4608,
        233_016 * 4608,
    ]
    assert result.num_blocks == 233_016


NGRAM_2 = '{"method": "ngram", "num_speculative_tokens": 2}'


def test_ngram_widens_the_ring_and_the_states(tmp_path: Path) -> None:
    """n-gram with 2 speculative tokens (no drafter layers): GDN conv ``[128, 3 + 2 = 5]``
    (``nvidia/model.py`` lines 829-848, ``mamba_utils.py`` lines 280-300): (640 + 1,024) x 2 =
    3,328 B, B = 16 x cdiv(3,328, 2,048) = 32, padded to 4,096; ring 4 x cdiv(4 + 2, 4) = 8 rows
    (``qsa_cache.py`` lines 850-851) x 32 x 2 = 512 B; each GDN spec 2 speculative blocks
    (``mamba/abstract.py`` lines 79-83). Widest page still 4,608: 233,016 blocks. Per request
    (``v1/kv_cache_interface.py`` lines 1076-1082): none 256 + 1 + 3 x (1 + 2) = 266, 876.0,
    876 x 8,192 = 7,176,192 tokens; align 256 + 1 + 3 x (2 + 2) = 269: 233,016 x 8,192 / 269 =
    7,096,160.1 tokens."""
    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    block, specs = qwen4_layer_specs(spec, num_speculative_tokens=2)
    got = [(s.layer_index, s.role, s.block_size, s.page_size_bytes) for s in specs]
    assert block == 32
    assert got == [
        *[(i, "gdn", 32, 4096) for i in range(3)],
        (3, "ring", 8, 8 * 32 * 2),
        (3, "compressed", 32, 512),
        (3, "attention", 32, 4096),
    ]
    assert [s.num_speculative_blocks for s in specs if s.role == "gdn"] == [2, 2, 2]
    none = _plan(_config(tmp_path), mamba_cache_mode="none", speculative_config=NGRAM_2)
    pages = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in none.groups]
    assert pages == [
        *[("mamba", [i], 4096) for i in range(3)],
        ("ring", [3], 512),
        ("full", [3], 4608),
    ]
    assert none.num_blocks == 233_016
    assert none.max_concurrency == pytest.approx(233_016 / 266) == 876.0
    assert none.kv_cache_tokens == 7_176_192
    align = _plan(_config(tmp_path), speculative_config=NGRAM_2)
    assert align.max_concurrency == pytest.approx(233_016 / 269)
    assert align.kv_cache_tokens == 7_096_160


def test_ngram_widens_the_ple_state(tmp_path: Path) -> None:
    """PLE on layers 0 and 2 with 2 speculative tokens: ``[256, 9 + 2 = 11]`` bf16 = 5,632 B
    (``model.py`` lines 797-816, ``short_conv_state_shape`` lines 257-266) > GDN 3,328: B = 16 x
    cdiv(5,632, 2,048) = 48, page 6,144; ring 8 rows (48 % 8 = 0). Widest 6,144 + 768 = 6,912:
    155,344 blocks; align: 171 + 1 + 5 x (2 + 2) = 192 per request: 809.08."""
    config = _config(tmp_path, ple_layer_ids=[1, 3], eos_token_id=1)
    spec = resolve_model(config).spec
    assert spec is not None
    block, specs = qwen4_layer_specs(spec, num_speculative_tokens=2)
    assert block == 48
    assert {s.page_size_bytes for s in specs if s.role in ("ple", "gdn")} == {6144}
    result = _plan(config, speculative_config=NGRAM_2)
    assert result.num_blocks == GiB // 6912 == 155_344
    assert result.max_concurrency == pytest.approx(155_344 / 192)


_EIGHT = {"num_hidden_layers": 8}
_MTP_1 = '{"method": "mtp", "num_speculative_tokens": 1}'


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"kv_dtype": "fp8_e5m2"}, r"^kv_dtype: fp8_e5m2 for Qwen4-Exp.*qsa.py lines 356-364"),
        (
            {"pp": 2, "model_changes": {"ple_layer_ids": [1, 3], "eos_token_id": 1}},
            r"^pp: Qwen4-Exp with ple_layer_ids; vLLM 0.32 raises 'Qwen4Exp N-gram PLE .*941-946",
        ),
        ({"tp": 8}, r"^tp: 8 does not divide Qwen4-Exp's GDN heads \(2 key, 4 value\)"),
        (
            {"speculative_config": '{"method": "ngram", "prompt_lookup_max": 3}'},
            # vLLM's words for a proposer without a draft config (config/speculative.py
            # lines 1819-1824), as for every model (mtp_tokens)
            r"^speculative_config: method ngram for Qwen4-Exp without num_speculative_tokens: "
            r"vLLM 0.32 raises 'num_speculative_tokens must be provided with speculative model",
        ),
        (
            {
                "speculative_config": '{"method": "mtp", "num_speculative_tokens": 3}',
                "model_changes": {"mtp_num_hidden_layers": 2},
            },
            r"^speculative_config: num_speculative_tokens 3 with Qwen4-Exp's 2 MTP layer\(s\); "
            r"vLLM 0.32 raises 'num_speculative_tokens:3 must be divisible by n_predict=2'",
        ),
        (
            {"speculative_config": '{"method": "mtp"}'},
            r"^speculative_config: method mtp for Qwen4-Exp without num_speculative_tokens: vLLM "
            r"0.32 raises 'num_speculative_tokens must be provided with speculative model unless",
        ),
        (
            # a quantized checkpoint's drafter is not sized (kvbudget.capacity.mtp_qwen4)
            {
                "speculative_config": _MTP_1,
                "kv_cache_memory_bytes": None,
                "model_changes": {"quantization_config": {"quant_method": "fp8"}},
            },
            r"^speculative_config: the MTP drafter's weights \(1 decoder layer\(s\) of "
            r"qwen4_exp_text\) are not estimated by kvbudget; pass --weights-bytes",
        ),
        (
            {"speculative_config": _MTP_1, "pp": 2, "model_changes": _EIGHT},
            r"^speculative_config: an MTP drafter with --pp > 1 is not priced",
        ),
        (
            # ring 4 x cdiv(4 + 5, 4) = 12 rows; B = 16 x cdiv((128 x 8 + 1,024) x 2, 2,048) = 32,
            # and 32 % 12 != 0: vLLM asserts (qsa_cache.py lines 852-855)
            {"speculative_config": '{"method": "ngram", "num_speculative_tokens": 5}'},
            r"^block_size: 32 for Qwen4-Exp; vLLM 0.32 asserts the QSA ring capacity 12 ",
        ),
        (
            {"speculative_config": '{"method": "suffix"}'},
            r"^speculative_config: method 'suffix' with Qwen4-Exp; vLLM 0.32 raises.*950-959",
        ),
    ],
)
def test_refusals_are_one_line(tmp_path: Path, extra: dict[str, Any], message: str) -> None:
    extra = dict(extra)
    changes = extra.pop("model_changes", {})
    with pytest.raises((ConfigError, LayoutNotApplicable), match=message):
        _plan(_config(tmp_path, **changes), **extra)


def test_a_ratio_the_block_does_not_divide_is_refused(tmp_path: Path) -> None:
    """ratio 32 with the default block 16: 'QSA cache block size must be divisible by the
    compression ratio' (``qsa_cache.py`` lines 777-780)."""
    with pytest.raises(ConfigError, match=r"^block_size: 16 .*multiple of 32"):
        _plan(_config(tmp_path, indexer_compress_ratio=32, indexer_budget=32))
    assert _plan(_config(tmp_path, indexer_compress_ratio=32, indexer_budget=32), block_size=32)


def test_a_model_dtype_other_than_bf16_is_refused(tmp_path: Path) -> None:
    """``qsa.py`` lines 354-355: 'Qwen4Exp QSA currently requires BF16'. A float32 config runs in
    bfloat16 under --dtype auto (``config/model.py`` lines 2422-2424): the same pool."""
    with pytest.raises(LayoutNotApplicable, match=r"^dtype: float16 for Qwen4-Exp.*BF16"):
        _plan(_config(tmp_path, torch_dtype="float16"))
    with pytest.raises(LayoutNotApplicable, match=r"^dtype: float32 for Qwen4-Exp.*bfloat16"):
        _plan(_config(tmp_path), dtype="float32")
    assert _plan(_config(tmp_path, torch_dtype="float32")).num_blocks == 233_016


#: a 40-layer Qwen4-Exp (indexed every 4th layer: 10 QSA, 30 GDN layers), PLE on layers 1 and 2
QWEN4_40 = {
    **QWEN4,
    "hidden_size": 2048,
    "num_hidden_layers": 40,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "indexer_n_heads": 16,
    "indexer_head_dim": 128,
    "indexer_budget": 2048,
    "ple_layer_ids": [1, 2],
    "eos_token_id": 1,
}


def test_forty_layers_at_tp2_on_an_h200(tmp_path: Path) -> None:
    """TP 2, 10 GiB of KV memory, max_model_len 32,768:

    * GDN (per rank): conv (128 x 16 x 2 + 128 x 32) / 2 = 4,096 x 3 = 12,288, temporal 16 x 128 x
      128 = 262,144: 548,864 B; PLE 4 x 2,048 x 9 x 2 = 147,456 B; K/V 1 head (2 / 2) x 512 x 2 =
      1,024 B per token: B = 16 x cdiv(548,864, 16,384) = 16 x 34 = 544, page 557,056;
      compressed 544 / 4 = 136 rows x 256 = 34,816; ring 4 x 128 x 2 = 1,024.
    * buckets PLE (2) | GDN (30) | ring (10) | K/V + compressed (10 + 10): repeats =
      approximate_gcd([2, 30, 10, 10], lower bound 10) = 10 (pad 8; d = 11: 14); anchor 10 x
      591,872 = 5,918,720 holds 10 states: PLE one group of 2, GDN cdiv(30, 10) = 3 groups of 10
      (5,570,560 B), rings one group (10,240 B), K/V one group of 5,918,720 B = bytes per block.
    * 10,737,418,240 // 5,918,720 = 1,814 blocks; per request cdiv(32,768, 544) = 61 + 1 ring +
      4 state groups x 2 (align) = 70: 25.914x, int(x 32,768) = 849,159 tokens; mode none: 66,
      27.485x, 900,623 tokens (scripts/check_qwen4_exp_vllm_groups.py printed the same)."""
    model = _config(tmp_path, **QWEN4_40)
    extra = {"tp": 2, "kv_cache_memory_bytes": 10 * GiB, "max_model_len": 32768}
    result = _plan(model, **extra)
    assert result.block_size == 544
    pages = [(g.kind, len(g.layer_indices), g.page_size_bytes) for g in result.groups]
    assert pages == [
        ("mamba", 2, 2 * 557_056),
        *[("mamba", 10, 10 * 557_056)] * 3,
        ("ring", 10, 10 * 1024),
        ("full", 10, 10 * (557_056 + 34_816)),
    ]
    assert result.groups[1].layer_indices[:3] == [0, 4, 8]  # strided, as vLLM splits a bucket
    assert result.num_blocks == 10 * GiB // 5_918_720 == 1814
    assert result.max_concurrency == pytest.approx(1814 / 70)
    assert result.kv_cache_tokens == 849_159
    none = _plan(model, mamba_cache_mode="none", **extra)
    assert none.max_concurrency == pytest.approx(1814 / 66)
    assert none.kv_cache_tokens == 900_623


def test_a_block_size_off_the_kernel_block_is_raised_or_refused(tmp_path: Path) -> None:
    """--block-size 24: the hybrid raise takes a = max(16, 24) = 24, B = 24 x cdiv(2,816, 24 x 128)
    = 24, rounded up to 16's multiple 32 (``platforms/interface.py`` lines 1060-1100), which the
    QSA backend takes (lines 797-824 check it): the same pool as the default. With no GDN layer
    nothing raises it, and the worker finds no common kernel block (``qsa.py`` lines 188-191)."""
    assert _plan(_config(tmp_path), block_size=24).block_size == 32
    linear = [k for k in QWEN4 if k.startswith("linear_")]
    only_qsa = _config(tmp_path, layer_types=["indexed_attention"] * 4, **dict.fromkeys(linear))
    with pytest.raises(ConfigError, match=r"^block_size: 24 for Qwen4-Exp.*--block-size 16"):
        _plan(only_qsa, block_size=24)


def test_tp_must_divide_the_qsa_heads(tmp_path: Path) -> None:
    """3 attention heads at TP 2: 'QSA attention heads must be divisible by TP size' (``qsa.py``
    lines 382-383); the GDN heads (2 key, 4 value) divide."""
    with pytest.raises(ConfigError, match=r"^tp: 2 does not divide Qwen4-Exp's 3 attention heads"):
        _plan(_config(tmp_path, num_attention_heads=3), tp=2)
