"""vLLM 0.32's pool for Qwen4-Exp with its MTP drafter (``--speculative-config`` method ``mtp``),
and with ``ngram_gpu``, worked by hand from vLLM's source.

As in ``test_plan_qwen4_exp_vllm.py`` (whose tiny model and page arithmetic these reuse) there is
no engine log: Qwen4-Exp is CUDA and ROCm only. Every figure is hand arithmetic from vLLM 0.32.0's
source, and ``scripts/check_qwen4_exp_vllm_groups.py`` (its ``mtp`` cases) ran vLLM's own
``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups`` /
``get_max_concurrency_for_kv_cache_config`` on the specs built from the same lines, with a
``speculative_config`` of method ``mtp`` (so ``_annotate_eagle_groups`` ran too: it flagged the
K/V group, which holds the last registered layer, and changed no byte); it printed the same
groups, block counts and concurrencies.

The drafter (``config/speculative.py`` lines 845-865; ``models/qwen4_exp/nvidia/mtp.py`` lines
189-230): ``mtp_num_hidden_layers`` QSA decoder layers at index ``num_hidden_layers + k``, built
from the target's config and cache config, so each registers the target QSA layer's three specs
(ring, compressed keys, K/V) after every target layer. ``num_speculative_tokens`` defaults to
``n_predict`` = ``mtp_num_hidden_layers`` (lines 1489-1492) and, as for n-gram, widens both conv
states and the ring (``vllm_config.num_speculative_tokens``, ``config/vllm.py`` lines 601-606;
``nvidia/model.py`` lines 797-848; ``common/qsa_cache.py`` lines 850-851) and is every GDN / PLE
spec's ``num_speculative_blocks`` (``mamba/abstract.py`` lines 79-83).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.checkpoint_mtp import is_skipped_mtp_tensor
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_qwen4 import qwen4_layer_specs
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB
from tests.unit.config_files import write_config
from tests.unit.plan.test_plan_qwen4_exp_vllm import NGRAM_2, QWEN4, QWEN4_40, _plan

#: no num_speculative_tokens: a "model" (the target's checkpoint, as vLLM sets it for mtp) builds
#: the draft config, whose n_predict sets it (``config/speculative.py`` lines 1274, 1477-1492)
MTP = '{"method": "mtp", "model": "Qwen/Qwen4-Exp"}'
MTP_1 = '{"method": "mtp", "num_speculative_tokens": 1}'


def _config(tmp_path: Path, **changes: Any) -> str:
    return write_config(tmp_path, QWEN4, **changes)


def test_one_drafter_layer_repeats_the_target_qsa_specs(tmp_path: Path) -> None:
    """``mtp_num_hidden_layers`` 1, 1 speculative token: GDN conv ``[128, 3 + 1]`` = 512 +
    temporal 1,024 = 1,536 x 2 = 3,072 B: B = 16 x cdiv(3,072, 2,048) = 32, page 32 x 128 =
    4,096; ring 4 x cdiv(4 + 1, 4) = 8 rows x 32 x 2 = 512 B; compressed 32 / 4 x 64 = 512 B.
    The drafter's layer 4 registers the same three specs after layer 3's."""
    spec = resolve_model(_config(tmp_path, mtp_num_hidden_layers=1)).spec
    assert spec is not None
    block, specs = qwen4_layer_specs(spec, num_speculative_tokens=1, mtp_layers=1)
    assert block == 32
    qsa = [("ring", 8, 512), ("compressed", 32, 512), ("attention", 32, 4096)]
    got = [(s.layer_index, s.role, s.block_size, s.page_size_bytes) for s in specs]
    assert got == [
        *[(i, "gdn", 32, 4096) for i in range(3)],
        *[(3, *s) for s in qsa],
        *[(4, *s) for s in qsa],
    ]


def test_one_drafter_layer_joins_the_packed_groups(tmp_path: Path) -> None:
    """Buckets: GDN 3 x 4,096 | rings 2 x 512 (layers 3, 4) | K/V + compressed 2 + 2. repeats =
    ``_approximate_gcd([3, 2, 2], lower_bound=2)`` (``kv_cache_utils.py`` lines 1825-1857): d = 2
    pads 1, d = 3 pads 2: 2. Anchor 2 x 4,608 = 9,216 holds 9,216 // 4,096 = 2 states, so GDN
    splits into max(cdiv(3, 2), cdiv(3, 2)) = 2 strided groups {0, 2} (8,192 B) and {1} (4,096
    B); the rings one group (1,024 B); K/V one group of 9,216 B = bytes per block (lines
    1927-1985). 1,073,741,824 // 9,216 = 116,508 blocks. Mode none: 256 + 1 ring + 2 GDN groups
    x (1 + 1 speculative) = 261 per request: 446.39, int(116,508 x 8,192 / 261) = 3,656,833
    tokens. Default align with the default 1 token (n_predict): 256 + 1 + 2 x (2 + 1) = 263:
    442.996, 3,629,024 tokens."""
    config = _config(tmp_path, mtp_num_hidden_layers=1)
    none = _plan(config, mamba_cache_mode="none", speculative_config=MTP_1)
    assert none.block_size == 32
    got = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in none.groups]
    assert got == [
        ("mamba", [0, 2], 8192),
        ("mamba", [1], 4096),
        ("ring", [3, 4], 1024),
        ("full", [3, 4], 9216),
    ]
    assert none.num_blocks == GiB // 9216 == 116_508
    assert none.max_concurrency == pytest.approx(116_508 / 261)
    assert none.kv_cache_tokens == 3_656_833
    align = _plan(config, speculative_config=MTP)
    assert align.num_blocks == 116_508
    assert align.max_concurrency == pytest.approx(116_508 / 263)
    assert align.kv_cache_tokens == 3_629_024
    assert any("1 MTP drafter layer(s)" in n for n in align.notes)


def test_the_deprecated_method_name_is_the_same_drafter(tmp_path: Path) -> None:
    """``qwen4_exp_mtp`` is in ``MTPModelTypes`` (``config/speculative.py`` line 51), renamed
    ``mtp`` (lines 1141-1145) before Qwen4-Exp's check (``models/config.py`` lines 950-959)."""
    config = _config(tmp_path, mtp_num_hidden_layers=1)
    result = _plan(
        config,
        mamba_cache_mode="none",
        speculative_config='{"method": "qwen4_exp_mtp", "num_speculative_tokens": 1}',
    )
    assert result.max_concurrency == pytest.approx(116_508 / 261)


def test_num_nextn_predict_layers_sets_the_tokens_not_the_layers(tmp_path: Path) -> None:
    """No ``mtp_num_hidden_layers``, ``num_nextn_predict_layers`` 2: vLLM builds
    ``getattr(config, "mtp_num_hidden_layers", 1)`` = 1 layer (``nvidia/mtp.py`` line 190) but
    ``n_predict`` = 2 (``config/speculative.py`` lines 849-853), so 2 speculative tokens: GDN conv
    ``[128, 5]``, (640 + 1,024) x 2 = 3,328 B, B = 32; ring 8 rows. The groups of the one-layer
    case; none: 256 + 1 + 2 x (1 + 2) = 263 per request: 116,508 / 263 = 442.996."""
    config = _config(tmp_path, num_nextn_predict_layers=2)
    result = _plan(config, mamba_cache_mode="none", speculative_config=MTP)
    got = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in result.groups]
    assert got[-2:] == [("ring", [3, 4], 1024), ("full", [3, 4], 9216)]
    assert result.num_blocks == 116_508
    assert result.max_concurrency == pytest.approx(116_508 / 263)


def test_three_drafter_layers(tmp_path: Path) -> None:
    """``mtp_num_hidden_layers`` 3, tokens default 3: GDN conv ``[128, 6]`` = 768 + 1,024 = 1,792
    x 2 = 3,584 B: B = 32; ring 4 x cdiv(7, 4) = 8 rows, 512 B. Buckets GDN 3 | rings 4 | K/V 4
    + 4: repeats = ``_approximate_gcd([3, 4, 4], lower_bound=4)`` = 4; anchor 4 x 4,608 = 18,432
    holds 4 states: GDN one group {0, 1, 2} (12,288 B), rings {3..6} (2,048 B), K/V 18,432 B.
    1 GiB // 18,432 = 58,254 blocks; none: 256 + 1 + (1 + 3) = 261: 223.195, 1,828,416 tokens."""
    result = _plan(
        _config(tmp_path, mtp_num_hidden_layers=3), mamba_cache_mode="none", speculative_config=MTP
    )
    got = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in result.groups]
    assert got == [
        ("mamba", [0, 1, 2], 12_288),
        ("ring", [3, 4, 5, 6], 2048),
        ("full", [3, 4, 5, 6], 18_432),
    ]
    assert result.num_blocks == GiB // 18_432 == 58_254
    assert result.max_concurrency == pytest.approx(58_254 / 261)
    assert result.kv_cache_tokens == 1_828_416


def test_ple_with_a_drafter_layer(tmp_path: Path) -> None:
    """PLE on layers 0 and 2, 1 drafter layer, 2 tokens: PLE ``[256, 9 + 2]`` bf16 = 5,632 B >
    GDN 3,328: B = 16 x cdiv(5,632, 2,048) = 48, page 6,144 (both states padded to it); ring 8
    rows, 512 B; compressed 12 x 64 = 768. Buckets PLE 2 | GDN 3 | rings 2 | K/V 2 + 2: repeats
    = ``_approximate_gcd([2, 3, 2, 2], lower_bound=2)`` = 2 (pad 1; d = 3 pads 3); anchor 2 x
    6,912 = 13,824 holds 2 states: PLE {0, 2} 12,288, GDN {0, 2} 12,288 and {1} 6,144, rings
    1,024, K/V 13,824. 1 GiB // 13,824 = 77,672 blocks; align: cdiv(8,192, 48) = 171 + 1 + 3 x
    (2 + 2) = 184: 422.13, 3,458,092 tokens."""
    config = _config(tmp_path, mtp_num_hidden_layers=1, ple_layer_ids=[1, 3], eos_token_id=1)
    result = _plan(config, speculative_config='{"method": "mtp", "num_speculative_tokens": 2}')
    assert result.block_size == 48
    got = [(g.kind, list(g.layer_indices), g.page_size_bytes) for g in result.groups]
    assert got == [
        ("mamba", [0, 2], 12_288),
        ("mamba", [0, 2], 12_288),
        ("mamba", [1], 6144),
        ("ring", [3, 4], 1024),
        ("full", [3, 4], 13_824),
    ]
    assert result.num_blocks == GiB // 13_824 == 77_672
    assert result.max_concurrency == pytest.approx(77_672 / 184)
    assert result.kv_cache_tokens == 3_458_092


def test_forty_layers_with_one_drafter_layer_at_tp2(tmp_path: Path) -> None:
    """The 40-layer model of ``test_plan_qwen4_exp_vllm``, TP 2, 10 GiB, 32,768, one drafter layer
    and its default 1 token: GDN conv 4,096 x (3 + 1) = 16,384 + temporal 262,144 = 278,528 x 2 =
    557,056 B; B = 16 x cdiv(557,056, 16,384) = 544, and 544 x 1,024 = 557,056 is the largest
    state page, so nothing is padded (``platforms/interface.py`` lines 1109-1110): PLE 4 x 2,048
    x (9 + 1) x 2 = 163,840 B. Ring 8 rows x 128 x 2 = 2,048; K/V 557,056 + compressed 136 x 256
    = 591,872 per QSA layer, 11 of them (layer 40 the drafter's). repeats =
    ``_approximate_gcd([2, 30, 11, 11], lower_bound=11)`` = 11 (pad 9 + 3 = 12; 12 pads 18);
    anchor 11 x 591,872 = 6,510,592: PLE one group {0, 1} (327,680 B), GDN max(cdiv(30, 11),
    cdiv(30, 6,510,592 // 557,056 = 11)) = 3 groups of 10 (5,570,560 B), rings 22,528 B, K/V
    6,510,592 B. 10 GiB // 6,510,592 = 1,649 blocks; align: 61 + 1 + 4 x (2 + 1) = 74: 22.284,
    730,195 tokens."""
    model = write_config(tmp_path, {**QWEN4, **QWEN4_40}, mtp_num_hidden_layers=1)
    result = _plan(
        model, tp=2, kv_cache_memory_bytes=10 * GiB, max_model_len=32768, speculative_config=MTP
    )
    assert result.block_size == 544
    pages = [(g.kind, len(g.layer_indices), g.page_size_bytes) for g in result.groups]
    assert pages == [
        ("mamba", 2, 327_680),
        *[("mamba", 10, 5_570_560)] * 3,
        ("ring", 11, 22_528),
        ("full", 11, 6_510_592),
    ]
    assert result.groups[-1].layer_indices[-1] == 40
    assert result.num_blocks == 10 * GiB // 6_510_592 == 1649
    assert result.max_concurrency == pytest.approx(1649 / 74)
    assert result.kv_cache_tokens == 730_195


def test_drafter_weights_from_the_engine_log(tmp_path: Path) -> None:
    """A --weights-bytes figure from the engine log (the drafter in it: a MoE QSA layer with
    hyper-connections, ``fc_embedding`` / ``fc_hidden``, norms and mixer, ``nvidia/mtp.py`` lines
    172-259) is taken as is; kvbudget sizes the drafter itself too
    (``test_plan_qwen4_weights_vllm.py``); the pool is the same 116,508 blocks' page per block,
    its size set by that budget."""
    config = _config(tmp_path, mtp_num_hidden_layers=1)
    result = _plan(config, speculative_config=MTP, kv_cache_memory_bytes=None, weights_bytes=GiB)
    assert result.groups[-1].page_size_bytes == 9216


def test_ngram_gpu_is_ngrams_pool(tmp_path: Path) -> None:
    """``ngram_gpu`` registers no KV layer (``NgramGPUKernel`` runs in a ``VllmConfig`` of its own,
    ``v1/spec_decode/ngram_proposer_gpu.py`` lines 240-258) and its ``num_speculative_tokens``
    widen the target's specs as n-gram's do (``vllm_config.num_speculative_tokens``): with
    --kv-cache-memory, the n-gram pool of ``test_ngram_widens_the_ring_and_the_states``: mode
    none 233,016 / 266 = 876.0, 7,176,192 tokens."""
    result = _plan(
        _config(tmp_path),
        mamba_cache_mode="none",
        speculative_config='{"method": "ngram_gpu", "num_speculative_tokens": 2}',
    )
    assert result.num_blocks == 233_016
    assert result.max_concurrency == pytest.approx(233_016 / 266) == 876.0
    assert result.kv_cache_tokens == 7_176_192


def test_ngram_gpu_buffers_join_the_non_kv_memory(tmp_path: Path) -> None:
    """Without --kv-cache-memory: vLLM 0.32's V2 runner keeps ``all_token_ids`` dense on the GPU
    for ``ngram`` and ``ngram_gpu`` alike (``v1/worker/gpu/model_runner.py`` lines 273-289;
    ``states.py`` lines 32-42): 16 x 8,192 int32 = 524,288 B, plus the speculator's ``scratch``
    16 x cdiv(8,192, 256) int64 = 4,096 B and ``drafts`` 16 x 2 int64 = 256 B
    (``spec_decode/ngram/speculator.py`` lines 184-207): 528,640 B more than the same weights
    without a proposer; both methods leave the same KV memory (the same pool too)."""
    common: dict[str, Any] = {
        "mamba_cache_mode": "none",
        "kv_cache_memory_bytes": None,
        "weights_bytes": GiB,
        "max_num_seqs": 16,
    }
    gpu = _plan(
        _config(tmp_path),
        speculative_config='{"method": "ngram_gpu", "num_speculative_tokens": 2}',
        **common,
    )
    cpu = _plan(_config(tmp_path), speculative_config=NGRAM_2, **common)
    plain = _plan(_config(tmp_path), **common)
    added = gpu.ranks[0].weights.num_bytes - plain.ranks[0].weights.num_bytes
    assert added == 16 * 8192 * 4 + 16 * 32 * 8 + 16 * 2 * 8 == 528_640
    assert gpu.available_kv_bytes == cpu.available_kv_bytes == plain.available_kv_bytes - added


def test_without_the_drafter_the_target_skips_the_mtp_tensors(tmp_path: Path) -> None:
    """Without method mtp a snapshot's ``total_size`` over-counts the drafter: the target's loader
    maps every name holding ``mtp.`` to None (``nvidia/model.py`` lines 923-926 for
    ``Qwen4ExpForCausalLM``, 1126-1129 for the multimodal model), so kvbudget takes those
    tensors' bytes off (``capacity.checkpoint_mtp``)."""
    spec = resolve_model(_config(tmp_path, mtp_num_hidden_layers=1)).spec
    assert spec is not None
    assert is_skipped_mtp_tensor(spec, "mtp.layers.0.self_attn.qkv_proj.weight")
    assert is_skipped_mtp_tensor(spec, "model.language_model.mtp.fc_hidden.weight")
    assert not is_skipped_mtp_tensor(spec, "model.language_model.layers.3.self_attn.o_proj.weight")


def _multimodal(tmp_path: Path, architecture: str) -> ModelSpec:
    text = {
        **QWEN4,
        "mtp_num_hidden_layers": 1,
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6]},
    }
    wrapper = {
        "model_type": "qwen4_exp",
        "architectures": [architecture],
        "text_config": text,
        "vision_config": {},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapper), encoding="utf-8")
    spec = resolve_model(str(path)).spec
    assert spec is not None
    return spec


def test_a_multimodal_drafter_ring_keeps_mrope_positions(tmp_path: Path) -> None:
    """``Qwen4ExpMTPConfig`` keeps M-RoPE when the checkpoint has a ``vision_config``
    (``models/config.py`` lines 970-978), as the multimodal target does: both rings hold 8 rows of
    (32 + 12) bf16 (``qsa_cache.py`` lines 814-829): 704 B each."""
    spec = _multimodal(tmp_path, "Qwen4ExpForConditionalGeneration")
    _block, specs = qwen4_layer_specs(spec, num_speculative_tokens=1, mtp_layers=1)
    assert [(s.layer_index, s.page_size_bytes) for s in specs if s.role == "ring"] == [
        (3, 8 * (32 + 12) * 2),
        (4, 8 * (32 + 12) * 2),
    ]


def test_rings_of_two_widths_are_refused(tmp_path: Path) -> None:
    """``Qwen4ExpForCausalLM`` strips M-RoPE from the target (``models/config.py`` lines 962-967)
    while its drafter keeps it beside a ``vision_config`` (lines 970-978): two ring widths, not
    modelled."""
    spec = _multimodal(tmp_path, "Qwen4ExpForCausalLM")
    with pytest.raises(
        LayoutNotApplicable, match=r"^speculative_config: method mtp .*rings differ"
    ):
        qwen4_layer_specs(spec, num_speculative_tokens=1, mtp_layers=1)


def test_ngram_takes_a_count_vllm_coerces() -> None:
    """vLLM's pydantic field takes ``"3"`` as 3 (``scripts/check_vllm_mtp_tokens.py`` ran it):
    the n-gram path reads the count through the same rule as the drafters."""
    from kvbudget.capacity.pool_qwen4 import qwen4_speculative_tokens

    assert qwen4_speculative_tokens('{"method": "ngram", "num_speculative_tokens": "3"}') == 3
    assert qwen4_speculative_tokens('{"method": "ngram", "num_speculative_tokens": 3}') == 3
