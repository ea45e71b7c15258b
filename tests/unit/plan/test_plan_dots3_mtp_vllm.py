"""Dots3-Note in vLLM 0.32 with ``--speculative-config`` method ``mtp`` and with
``--disable-hybrid-kv-cache-manager``, worked by hand from vLLM 0.32.0's source
(``site-packages/vllm/``; the pages, rows and alignments are those of
``tests/unit/plan/test_plan_dots3_vllm.py``):

* the drafter: ``SpeculativeConfig.hf_config_override`` appends ``mtp_layer_types`` (default
  ``num_nextn_predict_layers`` x ``sliding_attention``; ``Dots3NoteConfig`` defaults
  ``num_nextn_predict_layers`` to 1, ``transformers_utils/configs/dots3_note.py`` line 24) to the
  drafter's ``layer_types`` (``config/speculative.py`` lines 664-678), and
  ``Dots3NoteMultiTokenPredictor`` builds one ``Dots3NoteDecoderLayer`` per MTP layer at
  ``num_hidden_layers + k`` (``models/dots3_note/nvidia/mtp.py`` lines 103-120, 53-57), its kind
  picked by that list (``model.py`` lines 524-528): a sliding layer registers the target's
  ``SlidingWindowMLASpec``, a DSA layer an indexer (always, past ``num_hidden_layers``:
  ``model_executor/models/deepseek_v2.py`` lines 1158-1168) and a padded latent. They register
  after every target layer and are grouped with them (``v1/core/kv_cache_utils.py`` lines
  1860-1994; ``_annotate_eagle_groups``, lines 2029-2085, only flags a group);
* every sliding spec keeps ``extra_retained_tokens = num_prefill_lookahead_tokens - 1`` more
  tokens (``kv_cache_utils.py`` lines 2583-2590): 0 with one MTP module or
  ``num_speculative_tokens`` 1, else ``num_speculative_tokens - 1`` (``config/vllm.py`` lines
  644-662, ``use_multi_module_mtp``: ``config/speculative.py`` lines 1982-1988); the spec then
  admits ``cdiv(min(W - 1 + extra + T_b, L), B) + 1`` blocks (``v1/kv_cache_interface.py`` lines
  859-884);
* with the hybrid manager off ``unify_hybrid_kv_cache_specs`` (lines 1799-1821) rebuilds each
  ``SlidingWindowMLASpec`` as an ``MLAAttentionSpec`` via ``replace_as`` (lines 1746-1753;
  ``v1/kv_cache_interface.py`` lines 119-138), passing ``bounded_replay`` (line 956), a field
  ``MLAAttentionSpec`` lacks: a ``TypeError``. Without a sliding layer nothing is promoted
  (lines 1700-1703).

vLLM's own ``_get_packed_kv_cache_groups``, ``_get_kv_cache_bytes_per_block`` and
``get_kv_cache_groups`` give the same groups, bytes per block and the same ``TypeError``
(``scripts/check_dots3_vllm_groups.py``, the "+ MTP" and "hybrid manager off" lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.pool_dsv4 import approximate_gcd
from kvbudget.errors import ConfigError
from kvbudget.units import GiB
from tests.unit.plan.test_plan_dots3_vllm import INDEXER_PAGE, PAGE, ROW, _config, _plan

MTP = '{"method": "mtp", "num_speculative_tokens": 1}'
MTP_3 = '{"method": "mtp", "num_speculative_tokens": 3}'


def test_the_default_drafter_layer_fills_the_sliding_padding(tmp_path: Path) -> None:
    """One sliding MTP layer (index 8): 3 DSA, 6 sliding layers; approximate_gcd([3, 6], 3) = 3
    (no padding), the sliding bucket splits into cdiv(6, 3) = 2 strided groups (2, 4, 7 and 3,
    6, 8), each 3 x 139,264 = 417,792 B: the DSA group (443,136 B) stays the widest, so the pool
    is the one without the drafter: 204 rows a block, 2,418 blocks, 64 + 2 x 65 per request."""
    assert approximate_gcd([3, 6], 3) == 3
    result = _plan(_config(tmp_path), speculative_config=MTP)
    assert [list(g.layer_indices) for g in result.groups] == [[0, 1, 5], [2, 4, 7], [3, 6, 8]]
    assert [g.page_size_bytes for g in result.groups] == [
        3 * (PAGE + INDEXER_PAGE),
        3 * PAGE,
        3 * PAGE,
    ]
    assert 3 * PAGE == 417_792
    assert result.num_blocks == 1 * GiB // (204 * ROW) == 2_418
    assert result.kv_cache_tokens == 2_418 * 4096 // (64 + 2 * 65) == 51_052


def test_two_sliding_drafter_layers_widen_the_block(tmp_path: Path) -> None:
    """num_nextn_predict_layers 2, num_speculative_tokens 1 (one module used: no extra window):
    7 sliding layers; approximate_gcd([3, 7], 3) = 4 (d=3 pads 0 + 2, d=4 pads 1 + 1: a tie, to
    the larger); cdiv(7, 4) = 2 sliding groups, 2, 4, 7, 9 and 3, 6, 8; the widest 4 x 139,264 =
    557,056 B = 256 rows exactly; 1 GiB // 557,056 = 1,927 blocks; 64 + 2 x 65 per request."""
    assert approximate_gcd([3, 7], 3) == 4
    result = _plan(_config(tmp_path, num_nextn_predict_layers=2), speculative_config=MTP)
    assert [list(g.layer_indices) for g in result.groups] == [[0, 1, 5], [2, 4, 7, 9], [3, 6, 8]]
    assert [g.page_size_bytes for g in result.groups] == [
        3 * (PAGE + INDEXER_PAGE),
        4 * PAGE,
        3 * PAGE,
    ]
    assert 4 * PAGE == 256 * ROW == 557_056
    assert result.num_blocks == 1 * GiB // 557_056 == 1_927
    assert result.kv_cache_tokens == 1_927 * 4096 // (64 + 2 * 65) == 40_685


def test_a_dsa_drafter_layer_joins_the_dsa_group(tmp_path: Path) -> None:
    """mtp_layer_types ["full_attention"]: layer 8 holds an indexer and a padded latent; 4 DSA, 5
    sliding: approximate_gcd([4, 5], 4) = 5 (d=4 pads 3, d=5 pads 1): one DSA group of 4 x
    147,712 = 590,848 B and one sliding group of 5 x 139,264 = 696,320 B = 320 rows; 1 GiB //
    696,320 = 1,542 blocks; a request holds 64 + 65 = 129, int(1,542 / 129 x 4,096) tokens."""
    assert approximate_gcd([4, 5], 4) == 5
    result = _plan(
        _config(tmp_path, mtp_layer_types=["full_attention"]),
        speculative_config=MTP,
    )
    assert [list(g.layer_indices) for g in result.groups] == [[0, 1, 5, 8], [2, 3, 4, 6, 7]]
    assert [g.page_size_bytes for g in result.groups] == [4 * (PAGE + INDEXER_PAGE), 5 * PAGE]
    assert 5 * PAGE == 320 * ROW
    assert result.num_blocks == 1 * GiB // 696_320 == 1_542
    assert result.kv_cache_tokens == int(1_542 / 129 * 4096) == 48_961


def test_several_modules_keep_more_tokens_in_every_window(tmp_path: Path) -> None:
    """num_nextn_predict_layers 3, num_speculative_tokens 3: use_multi_module_mtp (min(3, 3) >
    1), num_prefill_lookahead_tokens = 3, so every sliding spec keeps extra_retained_tokens = 2
    (kv_cache_utils.py lines 2583-2590). 8 sliding layers: approximate_gcd([3, 8], 3) = 4 (d=3
    and d=4 both pad 1: the larger), two sliding groups 2, 4, 7, 9 and 3, 6, 8, 10 of 4 x
    139,264 = 557,056 B: 1,927 blocks. With max_num_batched_tokens 1,024 a sliding group holds
    cdiv(min(128 - 1 + 2 + 1,024, 4,096), 64) + 1 = cdiv(1,153, 64) + 1 = 20 blocks
    (kv_cache_interface.py lines 859-884), not the 19 of cdiv(1,151, 64) + 1: 64 + 2 x 20 = 104
    a request."""
    assert approximate_gcd([3, 8], 3) == 4
    config = _config(tmp_path, num_nextn_predict_layers=3)
    # num_speculative_tokens given: without a "model" vLLM 0.32 does not default it to
    # n_predict (config/speculative.py lines 1819-1824); the "model" variant below is the same
    result = _plan(config, speculative_config=MTP_3, max_num_batched_tokens=1024)
    assert [list(g.layer_indices) for g in result.groups] == [
        [0, 1, 5],
        [2, 4, 7, 9],
        [3, 6, 8, 10],
    ]
    assert [g.page_size_bytes for g in result.groups] == [
        3 * (PAGE + INDEXER_PAGE),
        4 * PAGE,
        4 * PAGE,
    ]
    assert result.num_blocks == 1 * GiB // (4 * PAGE) == 1_927
    assert result.kv_cache_tokens == 1_927 * 4096 // (64 + 2 * 20) == 75_894
    # a "model" builds the draft config, whose n_predict (3) is then the default (lines 1489-1492)
    named = '{"method": "mtp", "model": "rednote-hilab/dots3"}'
    assert _plan(config, speculative_config=named, max_num_batched_tokens=1024) == result


@pytest.mark.parametrize(
    ("changes", "speculative", "words"),
    [
        # config/speculative.py lines 1493-1501
        (
            {"num_nextn_predict_layers": 2},
            '{"method": "mtp", "num_speculative_tokens": 3}',
            "'num_speculative_tokens:3 must be divisible by n_predict=2'",
        ),
        # vLLM's own ValueError, config/speculative.py lines 669-673
        (
            {"mtp_layer_types": ["sliding_attention"] * 2},
            MTP,
            "'mtp_layer_types must have one entry per MTP layer: got 2 for 1 layers'",
        ),
        ({"num_nextn_predict_layers": 0}, MTP, "num_nextn_predict_layers >= 1"),
        ({}, '{"method": "eagle3", "model": "x/y"}', "method 'eagle3'"),
    ],
)
def test_drafters_not_modelled_are_refused_in_one_line(
    tmp_path: Path, changes: dict[str, Any], speculative: str, words: str
) -> None:
    with pytest.raises((ConfigError, LayoutNotApplicable)) as info:
        _plan(_config(tmp_path, **changes), speculative_config=speculative)
    message = str(info.value)
    assert message.startswith("speculative_config: ") and "\n" not in message
    assert words in message


def test_the_drafter_weights_are_not_estimated(tmp_path: Path) -> None:
    """Without --kv-cache-memory or --weights-bytes the drafter's weights are needed, and not
    sized for Dots3-Note: its own embed_tokens is dropped only when equal to the target's
    (llm_base_proposer.py lines 1436-1463), which the config cannot tell. Refused in one line."""
    with pytest.raises(ConfigError, match=r"^speculative_config: the MTP drafter's weights") as e:
        _plan(_config(tmp_path), speculative_config=MTP, kv_cache_memory_bytes=None, gpu="H100")
    assert "has_own_embed_tokens" in str(e.value) and "\n" not in str(e.value)


def test_hybrid_manager_off_fails_in_vllm_with_a_sliding_layer(tmp_path: Path) -> None:
    for changes, extra in (
        ({}, {}),
        ({"layer_types": ["full_attention"] * 8}, {"speculative_config": MTP}),
    ):
        with pytest.raises(LayoutNotApplicable) as info:
            _plan(_config(tmp_path, **changes), disable_hybrid_kv_cache_manager=True, **extra)
        message = str(info.value)
        assert message.startswith("disable_hybrid_kv_cache_manager: ") and "\n" not in message
        assert "unexpected keyword argument 'bounded_replay'" in message


def test_hybrid_manager_off_without_a_sliding_layer_is_the_same_pool(tmp_path: Path) -> None:
    """All DSA: nothing to promote, one uniform-type group as with the manager on:
    8 x 147,712 = 1,181,696 B rounded up to 544 rows; 1 GiB // (544 x 2,176) = 907 blocks."""
    result = _plan(
        _config(tmp_path, layer_types=["full_attention"] * 8), disable_hybrid_kv_cache_manager=True
    )
    assert [g.page_size_bytes for g in result.groups] == [8 * (PAGE + INDEXER_PAGE)]
    assert result.num_blocks == 1 * GiB // (544 * ROW) == 907


def test_compute_capability_12_with_a_dsa_drafter_layer_is_refused(tmp_path: Path) -> None:
    """Every target layer sliding, the drafter's a DSA layer: with the drafter the DSA impl is
    built, so vLLM 0.32 raises on compute capability 12 as for the target's own DSA layers."""
    config = _config(
        tmp_path, layer_types=["sliding_attention"] * 8, mtp_layer_types=["full_attention"]
    )
    with pytest.raises(LayoutNotApplicable, match=r"^gpu: compute capability 12 for Dots3-Note"):
        _plan(config, gpu="RTX-PRO-6000", speculative_config=MTP)


def test_compute_capability_12_without_a_dsa_layer_is_planned(tmp_path: Path) -> None:
    """Every layer sliding and no drafter: no sparse backend is picked (the sliding layers force
    Dots3NoteTritonMLABackend, models/dots3_note/nvidia/model.py lines 467-482, which
    _canonicalize_sparse_mla_kv_cache_dtype leaves alone, mla_attention.py lines 358-375), so
    auto stays bfloat16 and nothing raises."""
    config = _config(tmp_path, layer_types=["sliding_attention"] * 8)
    assert _plan(config, gpu="RTX-PRO-6000").kv_dtype == "bfloat16"
