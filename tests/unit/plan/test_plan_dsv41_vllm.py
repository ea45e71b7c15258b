"""vLLM 0.32's pool for DeepSeek-V4.1, worked by hand from vLLM's source.

DeepSeek-V4.1 has no CPU model in vLLM 0.32 (``models/deepseek_v41/`` holds ``nvidia/`` and
``amd/`` only) and no published config, so there is no engine log: every figure below is hand
arithmetic from vLLM 0.32.0's source, and ``scripts/check_dsv41_vllm_groups.py`` ran vLLM's own
``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups`` /
``get_max_concurrency_for_kv_cache_config`` on specs built from the same lines; it printed the
same pages, groups, block counts and concurrencies (1 GiB: 12,104 blocks, 18.824...; 10 GiB at
32k: 65,870 blocks, 42.579...).

The model is the small test config of ``tests/unit/spec/test_deepseek_v41.py`` (6 layers,
ratios 0 1 1 2 2 2, kv sources 1 3 5, index sources 1 2 3, head_dim 512, index_head_dim 128,
window 128). On a Hopper GPU (``models/deepseek_v41/attention.py`` lines 122-129, 512-522: the
584-byte ``fp8_ds_mla`` record, 576-byte pages; block 64, ``sparse_mla.py`` line 90):

* compressed cache of a kv source (lines 1138-1164): ``64 / ratio`` states of 584 B rounded up
  to 576: ratio 1 ``37,376 -> 37,440``; ratio 2 ``18,688 -> 19,008``;
* indexer keys of a kv-and-index source (lines 1206-1241): ``64 / ratio`` states of ``128 + 4``
  B: ratio 1 ``8,448 -> 8,640``; ratio 2 ``4,224 -> 4,608``;
* every layer's window (``sparse_swa.py`` lines 116-140): 32 tokens of 584 B: ``18,688 ->
  19,008``;
* the ratio-2 kv sources' compressor ring (``compressor.py`` lines 136-172): 8 rows of
  ``2 x 512`` float32: 32,768 B.

Groups (``v1/core/kv_cache_utils.py`` lines 1860-1994): the MLA bucket (layers 1, 3, 5) has
pages 37,440 x 1, 8,640 x 1, 19,008 x 2, 4,608 x 1: not balanced, one group of 88,704 B; no
balanced bucket mixes pages, so no repeats: the windows and rings are state buckets, split to
fit the 88,704-byte anchor: windows ``cdiv(6, 88,704 // 19,008 = 4) = 2`` strided groups (0 2 4,
1 3 5) of 57,024 B; rings ``cdiv(2, 88,704 // 32,768 = 2) = 1`` group of 65,536 B. One block
holds the widest group, 88,704 B; a request of 8,192 tokens takes 128 MLA blocks, ``cdiv(min(127
+ 2 x 8,192, 8,192), 32) + 1 = 257`` per window group and 1 ring block: 643.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.capacity.layouts.vllm_dsv41 import dsv41_layer_specs
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB
from tests.unit.config_files import write_config
from tests.unit.spec.test_deepseek_v41 import DSV41_FLAT

LEN = 8192
SWA = 19_008
RING = 32_768


def _config(tmp_path: Path, **changes: Any) -> str:
    return write_config(tmp_path, DSV41_FLAT, **changes)


def _plan(model: str, **extra: Any) -> PlanResult:
    fields: dict[str, Any] = {
        "model": model,
        "engine": "vllm",
        "engine_version": "0.32.0",
        "gpu": "H200",
        "kv_cache_memory_bytes": 1 * GiB,
        "weights_bytes": 10 * GiB,
        "max_model_len": LEN,
        "max_num_batched_tokens": LEN,
        **extra,
    }
    return make_plan(PlanRequest(**fields))


def test_specs_worked_from_the_source(tmp_path: Path) -> None:
    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    got = [
        (s.layer_index, s.role, s.block_size, s.page_size_bytes) for s in dsv41_layer_specs(spec)
    ]
    assert got == [
        (0, "swa", 32, SWA),
        (1, "compressed", 64, 37_440),
        (1, "indexer_keys", 64, 8_640),
        (1, "swa", 32, SWA),
        (2, "swa", 32, SWA),  # reads layer 1's compressed cache and indexer keys
        (3, "compressed", 64, 19_008),
        (3, "indexer_keys", 64, 4_608),
        (3, "swa", 32, SWA),
        (3, "compressor_state", 8, RING),
        (4, "swa", 32, SWA),
        (5, "compressed", 64, 19_008),
        (5, "swa", 32, SWA),
        (5, "compressor_state", 8, RING),
    ]


def test_pool_as_vllm_packs_it(tmp_path: Path) -> None:
    result = _plan(_config(tmp_path))
    assert result.num_blocks == GiB // 88_704 == 12_104
    assert result.max_concurrency == pytest.approx(12_104 / (128 + 257 + 257 + 1))


def test_twelve_layers_at_32k(tmp_path: Path) -> None:
    """Ratios 0 0 1 1 2 2 1 1 2 2 2 2, kv and index sources 2 4 6 8 10: MLA 2 x (37,440 + 8,640)
    + 3 x (19,008 + 4,608) = 163,008 B (unbalanced: whole); windows ``cdiv(12, 163,008 // 19,008
    = 8) = 2`` groups; rings (4, 8, 10) ``cdiv(3, 4) = 1``. 32,768 tokens: 512 MLA blocks,
    ``cdiv(127 + 16,384, 32) + 1 = 517`` per window group, 1 ring: 1,547."""
    model = _config(
        tmp_path,
        num_hidden_layers=12,
        compress_ratios=[0, 0, 1, 1, 2, 2, 1, 1, 2, 2, 2, 2],
        kv_source_layer_ids=[2, 4, 6, 8, 10],
        index_source_layer_ids=[2, 4, 6, 8, 10],
    )
    result = _plan(model, kv_cache_memory_bytes=10 * GiB, max_model_len=32_768)
    assert result.num_blocks == 10 * GiB // 163_008 == 65_870
    assert result.max_concurrency == pytest.approx(65_870 / 1_547)


def test_without_compressed_layers_one_group(tmp_path: Path) -> None:
    """Four sliding layers: one page size, so vLLM does not pack (``_get_packed_kv_cache_groups``
    returns None, lines 1876-1879) and the four windows are one group: 4 x 19,008 = 76,032 B a
    block, 257 blocks a request (vLLM's own grouping printed 14,122 blocks, 54.949...)."""
    model = _config(
        tmp_path,
        num_hidden_layers=4,
        compress_ratios=None,
        kv_source_layer_ids=None,
        index_source_layer_ids=None,
        index_head_dim=None,
        index_n_heads=None,
    )
    result = _plan(model)
    assert result.num_blocks == GiB // 76_032 == 14_122
    assert result.max_concurrency == pytest.approx(14_122 / 257)


def test_calc_vllm_layout_counts_every_cache(tmp_path: Path) -> None:
    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    layout = vllm_layout(spec, tokens=LEN, seqs=1)
    groups = layout.stages[0].groups
    assert [g.bytes_per_sequence for g in groups] == [
        4 * 57_024,  # each window group: the 4 blocks of 32 a 128-token window touches
        4 * 57_024,
        128 * 88_704,
        65_536,
    ]
    assert layout.kv_dtype == "fp8_ds_mla"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"kv_cache_memory_bytes": None}, "kv_cache_memory"),
        (
            {"speculative_config": '{"method": "ngram", "num_speculative_tokens": 2}'},
            "speculative_config",
        ),
        ({"block_size": 128}, "block_size"),
        ({"pp": 2}, "pp"),
        ({"kv_dtype": "bfloat16"}, "kv_dtype"),
        ({"engine": "sglang"}, "engine"),
        ({"qk_rope_head_dim": 32}, "qk_rope_head_dim"),
        ({"head_dim": 256}, "head_dim"),
    ],
)
def test_what_is_not_modelled_is_refused_in_one_line(
    tmp_path: Path, extra: dict[str, Any], field: str
) -> None:
    config = {k: extra.pop(k) for k in ("qk_rope_head_dim", "head_dim") if k in extra}
    with pytest.raises((LayoutNotApplicable, ConfigError)) as caught:
        _plan(_config(tmp_path, **config), **extra)
    assert str(caught.value).startswith(f"{field}: ") and "\n" not in str(caught.value)


def test_weights_are_refused_without_the_flag(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^weights: deepseek_v41 \(DeepSeek-V4.1\) is not priced"
    ):
        _plan(_config(tmp_path), weights_bytes=None)


@pytest.mark.parametrize("engine", ["hf", "sglang", "llamacpp"])
def test_other_engines_refuse_it_in_one_line(tmp_path: Path, engine: str) -> None:
    from kvbudget.capacity.kvbytes import run_layout

    spec = resolve_model(_config(tmp_path)).spec
    assert spec is not None
    with pytest.raises(LayoutNotApplicable, match=rf"^engine: {engine} for model_type"):
        run_layout(
            spec, engine, tokens=LEN, seqs=1, kv_dtype="auto", v_dtype=None, tp=1, pp=1, dp=1,
            block_size=None,
        )  # fmt: skip


def test_nested_text_config_plans_alike(tmp_path: Path) -> None:
    nested = {
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "text_config": {k: v for k, v in DSV41_FLAT.items() if k != "architectures"},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(nested), encoding="utf-8")
    assert _plan(str(path)).num_blocks == 12_104


@pytest.mark.parametrize("gpu", ["B200", "MI300X"])
def test_only_hopper_is_modelled(tmp_path: Path, gpu: str) -> None:
    """SM100 writes the V4.1 MXFP8 record (528 B, 512-byte pages, block 128: attention.py lines
    122-129, 512-522; sparse_mla.py line 90); ROCm runs AITER: neither is modelled."""
    with pytest.raises(LayoutNotApplicable, match=r"^gpu: .* for deepseek_v41: only a Hopper"):
        _plan(_config(tmp_path), gpu=gpu)


def test_without_a_device_the_hopper_layout_is_planned(tmp_path: Path) -> None:
    assert _plan(_config(tmp_path), gpu=None).num_blocks == 12_104
