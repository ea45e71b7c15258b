"""SGLang 0.5.23's pools for Qwen4-Exp (GDN + QSA, PLE states), worked by hand from its source.

Qwen4-Exp is served on CUDA only and the catalog has no published Qwen4-Exp config, so every
figure below is hand arithmetic from the sglang 0.5.23 wheel (paths under ``sglang/srt/``),
never from kvbudget, on the tiny Qwen4-Exp of ``tests/unit/spec/test_dots3_qwen4.py`` (4 layers:
linear, linear, linear, indexed; 2 attention heads, 1 KV head of 32; GDN 2 key / 4 value heads of
16, conv kernel 4; QSA ``indexer_head_dim`` 32, ``indexer_compress_ratio`` 4; bfloat16), with
``indexer_budget`` 2048 (its 16 is refused by SGLang, below) and wrapped as SGLang's only
architecture, ``Qwen4ExpForConditionalGeneration`` (``models/qwen4_exp.py`` line 2694):

* page 64 (``arg_groups/model_overrides/qwen4_exp.py`` lines 89-96).
* per token (``model_executor/pool_configurator.py`` lines 491-537): the QSA layer's K and V,
  ``get_num_kv_heads(tp) = max(1, 1 // tp) = 1`` head x (32 + 32) x 2 B = 128 B, plus
  ``_compute_qsa_cell_size`` (lines 532-558; ``mem_cache/qsa_kv_pool.py`` lines 27-28, 59-73):
  ``1 x 32 x 2 // 4 x 1 layer`` = 16 B: cell 144 B (fp8_e4m3: 64 + 16 = 80 B).
* GDN state (``configs/qwen3_next.py`` lines 288-313, ``configs/mamba_utils.py`` lines 194-243):
  ``conv_dim = 16 x 4 + 2 x 2 x 16 = 128``; conv ``[128 / tp, 3]`` bf16, temporal ``[4 / tp, 16,
  16]`` float32 (lines 46-105): TP 1 ``384 x 2 + 1,024 x 4 = 4,864`` B x 3 layers = 14,592 B;
  TP 2 ``192 x 2 + 512 x 4 = 2,432`` x 3 = 7,296 B per request slot (``mamba_cache_per_req``,
  lines 116-125; the PLE states are not in it).
* ``_handle_max_mamba_cache`` (``mem_cache/kv_cache_configurator.py`` lines 3229-3409, no
  speculative decoding): ``budget = rest x 0.9 / 1.9``, ``max_mamba_cache_size = int((budget -
  per_req) // per_req)``; the token pool gets ``rest - (size + 1) x per_req``;
  ``DefaultPoolConfigurator.calculate_pool_sizes`` (lines 637-647): ``rest // cell`` floored to 64.
* ``resolve_max_num_reqs`` (lines 3119-3172): ``min(clamp(int(tokens / 8,192 x 512), 2048,
  4096), tokens // 2)``, then ``max_mamba_cache_size // 5``: 3 (line 227) + 2 tracking slots of the
  ``extra_buffer`` strategy SGLang picks for 64-token pages with the overlap schedule
  (``arg_groups/overrides.py`` lines 403-413, 453-486; ``mem_cache/allocation_sizing.py`` lines
  11-19).
* outside the budget, per state slot on a PLE layer ``[hidden 64 x hc_count 4, (4 - 1) x
  ngram_size 3]`` bf16 = 4,608 B, plus ``ngram_size - 1 = 2`` int64 once (``mem_cache/
  ple_state_pool.py`` lines 73-77, 177-182; ``configs/qwen4_exp.py`` lines 96-116); per request
  row the QSA ring ``4 x 32 x 2 = 256`` B per QSA layer plus ``4 x 3 x 8 = 96`` B of positions
  (``qsa_kv_pool.py`` lines 171-205).

``scripts/check_sglang_qwen4_pool.py`` runs SGLang's own code on the same config (its configs,
``parse_qsa_profile``, ``QSATokenToKVPool`` and the PLE pools on the CPU,
``DefaultPoolConfigurator``, ``_handle_max_mamba_cache`` / ``resolve_max_num_reqs`` as written): it
printed the same cells, slots, token counts, running requests and outside-budget bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB, MiB
from tests.unit.spec.test_dots3_qwen4 import _qwen4

LEN = 8192
CELL = 1 * (32 + 32) * 2 + 1 * 32 * 2 // 4  # 128 + 16 = 144
GDN_TP1 = 3 * (128 * 3 * 2 + 4 * 16 * 16 * 4)  # 14,592
GDN_TP2 = 3 * (64 * 3 * 2 + 2 * 16 * 16 * 4)  # 7,296
PLE_SLOT = 2 * 256 * 9 * 2 + 2 * 8  # two PLE layers + the n-gram context: 9,232
RING_ROW = 4 * 32 * 2 + 4 * 3 * 8  # 352


def _text(**changes: Any) -> dict[str, Any]:
    return {**_qwen4(indexer_budget=2048), "vocab_size": 1000, **changes}


def _config(tmp_path: Path, *, arch: str = "Qwen4ExpForConditionalGeneration", **text: Any) -> str:
    wrapper = {
        "model_type": "qwen4_exp",
        "architectures": [arch],
        "text_config": {k: v for k, v in _text(**text).items() if v is not None},
        "vision_config": {},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapper), encoding="utf-8")
    return str(path)


def _plan(model: str, **extra: Any) -> PlanResult:
    fields: dict[str, Any] = {
        "model": model,
        "engine": "sglang",
        "gpu": "H200",
        "kv_cache_memory_bytes": 1 * GiB,
        "max_model_len": LEN,
        **extra,
    }
    return make_plan(PlanRequest(**fields))


def test_tp1_pool_worked_from_the_source(tmp_path: Path) -> None:
    """rest 1 GiB: budget 1,073,741,824 x 0.9 / 1.9 = 508,614,548.2; (508,614,548.2 - 14,592) //
    14,592 = 34,854 slots (+1 padding): 1,073,741,824 - 34,855 x 14,592 = 565,137,664 B;
    // 144 = 3,924,567, floored to 64: 3,924,544 tokens. max_running: int(3,924,544 / 8,192 x
    512) = 245,284 -> 4,096 (< tokens // 2, < 34,854 // 5 = 6,970)."""
    result = _plan(_config(tmp_path))
    assert result.error is None
    assert result.engine_version == "0.5.23"
    assert result.block_size == 64
    sg = result.sglang
    assert sg is not None
    assert sg.cell_size_bytes == CELL
    assert sg.mamba_state_bytes_per_request == GDN_TP1
    assert sg.max_mamba_cache_size == 34_854
    assert sg.max_total_num_tokens == result.kv_cache_tokens == 3_924_544
    assert result.max_num_seqs == 4096
    # the full pool's log line: K = V = 3,924,544 x 64 B = 0.23 GiB
    assert result.log_lines == (
        "KV Cache is allocated. #tokens: 3924544, K size: 0.23 GB, V size: 0.23 GB",
    )


def test_tp2_splits_the_gdn_state_not_the_kv_head(tmp_path: Path) -> None:
    """TP 2: 1 KV head replicated (max(1, 1 // 2)), the compressed key not split: cell 144 B;
    GDN 7,296 B: (508,614,548.2 - 7,296) // 7,296 = 69,710; 1,073,741,824 - 69,711 x 7,296 =
    565,130,368; // 144 = 3,924,516 -> 3,924,480 tokens."""
    result = _plan(_config(tmp_path), tp=2)
    sg = result.sglang
    assert sg is not None
    assert sg.cell_size_bytes == CELL
    assert sg.mamba_state_bytes_per_request == GDN_TP2
    assert sg.max_mamba_cache_size == 69_710
    assert result.kv_cache_tokens == 3_924_480


def test_tp4_extends_the_gdn_key_groups(tmp_path: Path) -> None:
    """TP 4 (4 attention heads): 2 GDN key heads are not divisible by 4, so SGLang extends them to
    2 + (4 - 2) = 4 groups (``configs/mamba_utils.py`` lines 29-38, 218-220): conv_dim = 64 + 2 x 4
    x 16 = 192, conv [48, 3] bf16 = 288 B, temporal [1, 16, 16] float32 = 1,024 B: 1,312 x 3 =
    3,936 B. (508,614,548.2 - 3,936) // 3,936 = 129,220; 1,073,741,824 - 129,221 x 3,936 =
    565,127,968; // 144 = 3,924,499 -> 3,924,480 tokens (the cell: 1 KV head replicated)."""
    result = _plan(_config(tmp_path, num_attention_heads=4), tp=4)
    sg = result.sglang
    assert sg is not None
    assert sg.mamba_state_bytes_per_request == 3 * (48 * 3 * 2 + 1 * 16 * 16 * 4) == 3936
    assert sg.max_mamba_cache_size == 129_220
    assert result.kv_cache_tokens == 3_924_480


def test_fp8_halves_the_kv_not_the_index_keys(tmp_path: Path) -> None:
    """fp8_e4m3: 1 x 64 x 1 + 16 = 80 B per token: 565,137,664 // 80 = 7,064,220 -> 7,064,192."""
    result = _plan(_config(tmp_path), kv_dtype="fp8_e4m3")
    assert result.sglang is not None
    assert result.sglang.cell_size_bytes == 80
    assert result.kv_cache_tokens == 7_064_192


def test_five_state_slots_cap_the_running_requests(tmp_path: Path) -> None:
    """rest 64 MiB: budget 67,108,864 x 0.9 / 1.9 = 31,788,409.3; (.. - 14,592) // 14,592 = 2,177;
    67,108,864 - 2,178 x 14,592 = 35,327,488; // 144 = 245,329 -> 245,312 tokens;
    max_running 4,096 capped at 2,177 // 5 = 435."""
    result = _plan(_config(tmp_path), kv_cache_memory_bytes=64 * MiB)
    assert result.sglang is not None
    assert result.sglang.max_mamba_cache_size == 2177
    assert result.kv_cache_tokens == 245_312
    assert result.max_num_seqs == 435


def test_ple_states_are_allocated_beside_the_budget(tmp_path: Path) -> None:
    """PLE on layers 0 and 2: not in ``mamba_cache_per_req``, so the pool is the TP 1 one; SGLang
    then allocates 34,855 slots x 9,232 B + 4,097 ring rows x 352 B = 321,781,360 + 1,442,144 =
    323,223,504 B = 308.2 MiB more (308.25 MiB is 323,223,552 B), out of its headroom."""
    result = _plan(_config(tmp_path, ple_layer_ids=[1, 3], eos_token_id=1))
    assert result.kv_cache_tokens == 3_924_544
    assert result.sglang is not None
    assert result.sglang.mamba_state_bytes_per_request == GDN_TP1
    assert 34_855 * PLE_SLOT + 4_097 * RING_ROW == 323_223_504
    assert any(n.startswith("SGLang allocates 308.2 MiB more per rank") for n in result.notes)


def test_multimodal_reserves_100_mib_before_the_state_pool(tmp_path: Path) -> None:
    """From the device (``--weights-bytes`` 100 GiB, ``--non-torch-bytes`` 1 GiB, fraction 0.8):
    free (143,771 - 512) MiB = 150,217,949,184 B; rest = int(free - 100 GiB - 1 GiB - free x (1 -
    0.8)) = 11,726,435,123 B, less 100 MiB (SGLANG_VLM_CACHE_SIZE_MB) = 11,621,577,523 for the
    multimodal wrapper: 377,257 slots, 11,621,577,523 - 377,258 x 14,592 = 6,116,628,787;
    // 144 -> 42,476,544 tokens. With language_model_only: 380,661 slots, 42,859,776 tokens."""
    device = {
        "kv_cache_memory_bytes": None,
        "weights_bytes": 100 * GiB,
        "non_torch_bytes": 1 * GiB,
        "mem_fraction_static": 0.8,
    }
    multimodal = _plan(_config(tmp_path), **device)
    assert multimodal.sglang is not None
    assert multimodal.available_kv_bytes == 11_621_577_523
    assert multimodal.sglang.max_mamba_cache_size == 377_257
    assert multimodal.kv_cache_tokens == 42_476_544
    text_only = _plan(_config(tmp_path, language_model_only=True), **device)
    assert text_only.available_kv_bytes == 11_726_435_123
    assert text_only.kv_cache_tokens == 42_859_776


def test_two_pipeline_stages_of_four_layers(tmp_path: Path) -> None:
    """8 layers (LLLQ LLLQ), PP 2: each stage 3 GDN layers and 1 QSA layer; the state pool is
    charged the largest stage's share, 14,592 x 3 / 6 x 2 = 14,592 B (``kv_cache_configurator.py``
    lines 3233-3258), the cell 144 B: each stage as the 4-layer TP 1 pool, 3,924,544 tokens."""
    result = _plan(_config(tmp_path, num_hidden_layers=8), pp=2)
    assert result.sglang is not None
    assert result.sglang.mamba_state_bytes_per_request == GDN_TP1
    assert result.kv_cache_tokens == 3_924_544


def test_uneven_or_attention_free_stages_are_refused(tmp_path: Path) -> None:
    """SGLang's split gives a remainder to the last stages (``distributed/utils.py`` lines
    110-150); a stage without a QSA layer sizes from the others (``pool_configurator.py`` lines
    239-250): neither is modelled."""
    with pytest.raises(LayoutNotApplicable, match=r"pp: 3 does not divide .* 4 layers"):
        _plan(_config(tmp_path), pp=3)
    with pytest.raises(LayoutNotApplicable, match=r"stage 0 \(layers 0-1\) holds no QSA layer"):
        _plan(_config(tmp_path), pp=2)


def test_calc_sglang_layout_counts_every_pool(tmp_path: Path) -> None:
    """``calc --engine sglang``, 2 sequences of 100 tokens: 128 tokens (two pages) x 144 B + a
    352 B ring row + a 14,592 B GDN slot = 33,376 B each; with PLE 9,232 B more per slot."""
    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    layout = sglang_layout(spec, tokens=100, seqs=2)
    assert layout.block_size == 64
    assert layout.total_bytes == (128 * CELL + RING_ROW + GDN_TP1) * 2 == 66_752
    spec = resolve_model(_config(tmp_path, ple_layer_ids=[1, 3], eos_token_id=1)).spec
    assert spec is not None
    layout = sglang_layout(spec, tokens=100, seqs=2)
    assert layout.total_bytes == (128 * CELL + RING_ROW + GDN_TP1 + PLE_SLOT) * 2


@pytest.mark.parametrize(
    ("text", "arch", "match"),
    [
        ({"indexer_budget": 16}, None, r"fast_topk_v2 requires .* got 4.*config.py lines 59-68"),
        ({"indexer_kv_heads": 2}, None, r"require indexer_kv_heads=1"),
        (
            {"indexer_compress_ratio": 3, "indexer_budget": 1536},
            None,
            r"page a multiple of the compress ratio.*qsa_kv_pool.py lines 99-106",
        ),
        ({}, "Qwen4ExpForCausalLM", r"Qwen4ExpForConditionalGeneration only.*line 2694"),
    ],
)
def test_what_sglang_refuses(
    tmp_path: Path, text: dict[str, Any], arch: str | None, match: str
) -> None:
    config = _config(tmp_path, arch=arch or "Qwen4ExpForConditionalGeneration", **text)
    with pytest.raises(LayoutNotApplicable, match=match):
        _plan(config)
    spec = resolve_model(config).spec
    assert spec is not None
    with pytest.raises(LayoutNotApplicable, match=match):
        sglang_layout(spec, tokens=100, seqs=1)


def test_tp_refusals_in_sglangs_words(tmp_path: Path) -> None:
    """TP 4: 2 attention heads (``models/qwen3_5.py`` line 1293); fp4 is not modelled."""
    with pytest.raises(ConfigError, match=r"total_num_heads % attn_tp_size"):
        _plan(_config(tmp_path), tp=4)
    with pytest.raises(ConfigError, match=r"kv_dtype: nvfp4 for Qwen4-Exp"):
        _plan(_config(tmp_path), kv_dtype="nvfp4")


def test_version_and_speculation_refused(tmp_path: Path) -> None:
    with pytest.raises(LayoutNotApplicable, match=r"0\.5\.4: .*0\.5\.23 only"):
        _plan(_config(tmp_path), engine_version="0.5.4")
    with pytest.raises(ConfigError, match=r"speculative_config: .*state pool"):
        _plan(
            _config(tmp_path), speculative_config='{"method": "mtp", "num_speculative_tokens": 1}'
        )
