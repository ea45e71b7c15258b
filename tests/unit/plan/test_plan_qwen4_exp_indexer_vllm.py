"""vLLM 0.32's ``--attention-config '{"indexer_kv_dtype": "fp8"}'`` with Qwen4-Exp, worked by hand.

The QSA indexer's compressed keys take ``vllm_config.attention_config.resolve_indexer_kv_dtype(
"bf16")``: fp8 is ``torch.float8_e4m3fn`` (plain e4m3, no scales), bf16 ``torch.bfloat16``, any
other value raises (``models/qwen4_exp/nvidia/indexer_qsa.py`` lines 150-163); the raw-key ring
stays bf16 (line 167). ``--attention-config`` is ``AttentionConfig`` (``engine/arg_utils.py``
line 1856; ``config/attention.py`` lines 13, 88-92, 163-167). The tiny model and its pages are
``test_plan_qwen4_exp_vllm``'s; ``scripts/check_qwen4_exp_vllm_groups.py`` (its "fp8 indexer"
cases) ran vLLM's own grouping on an ``MLAAttentionSpec`` of ``float8_e4m3fn`` and printed the
same pages, block counts and concurrencies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.errors import ConfigError
from kvbudget.units import GiB
from tests.unit.config_files import write_config
from tests.unit.plan.test_plan_qwen4_exp_vllm import QWEN4, RING_PAGE, _plan

FP8_INDEXER = '{"indexer_kv_dtype": "fp8"}'


def test_fp8_indexer_halves_the_compressed_keys(tmp_path: Path) -> None:
    """B = 32 as with bf16 keys (the indexer does not enter the block size); compressed keys 32 /
    4 = 8 rows x 32 x 1 B = 256 B, so the K/V group's page is 4,096 + 256 = 4,352; the ring keeps
    its 256 bf16 bytes. 1,073,741,824 // 4,352 = 246,723 blocks; mode none: 256 + 1 + 3 = 260 per
    request: 948.93, int(246,723 x 8,192 / 260) = 7,773,672 tokens."""
    result = _plan(
        write_config(tmp_path, QWEN4), mamba_cache_mode="none", attention_config=FP8_INDEXER
    )
    assert result.block_size == 32
    got = [(g.kind, g.page_size_bytes) for g in result.groups]
    assert got == [*[("mamba", 4096)] * 3, ("ring", RING_PAGE), ("full", 4352)]
    assert result.num_blocks == GiB // 4352 == 246_723
    assert result.max_concurrency == pytest.approx(246_723 / 260)
    assert result.kv_cache_tokens == 7_773_672
    assert any("one fp8 row per indexer_compress_ratio tokens" in n for n in result.notes)


def test_fp8_indexer_with_an_fp8_kv_cache(tmp_path: Path) -> None:
    """fp8 KV (64 B per token): B = 48, page 3,072; compressed 12 rows x 32 x 1 = 384: 3,456 B per
    block, 1 GiB // 3,456 = 310,689 blocks; none: 171 + 1 + 3 = 175: 1,775.37."""
    result = _plan(
        write_config(tmp_path, QWEN4),
        mamba_cache_mode="none",
        kv_dtype="fp8",
        attention_config=FP8_INDEXER,
    )
    assert result.block_size == 48
    assert result.groups[-1].page_size_bytes == 3456
    assert result.num_blocks == GiB // 3456 == 310_689
    assert result.max_concurrency == pytest.approx(310_689 / 175)


def test_auto_and_bf16_are_the_default_pool(tmp_path: Path) -> None:
    """``auto`` resolves to the indexer's bf16 default (``indexer_qsa.py`` lines 152-154): the
    233,016 blocks of 4,608 B of ``test_tiny_pool_in_mamba_cache_mode_none``."""
    config = write_config(tmp_path, QWEN4)
    for value in ("auto", "bf16"):
        result = _plan(config, attention_config=f'{{"indexer_kv_dtype": "{value}"}}')
        assert result.num_blocks == GiB // 4608 == 233_016


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '{"indexer_kv_dtype": "mxfp4"}',
            r"^attention_config: indexer_kv_dtype 'mxfp4' for Qwen4-Exp; vLLM 0.32 raises "
            r"\"indexer_kv_dtype='mxfp4' is not supported by the Qwen4Exp QSA indexer",
        ),
        (
            '{"indexer_kv_dtype": "int4"}',
            r"^attention_config: indexer_kv_dtype 'int4'; vLLM 0.32 takes auto, bf16, fp8, mxfp4, "
            r"nvfp4",
        ),
        ('{"backend": "FLASH_ATTN"}', r"^attention_config: backend not modelled"),
        ("fp8", r"^attention_config: 'fp8' is not JSON"),
    ],
)
def test_refusals_are_one_line(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises((ConfigError, LayoutNotApplicable), match=message):
        _plan(write_config(tmp_path, QWEN4), attention_config=value)


def test_another_models_indexer_dtype_is_refused() -> None:
    """kvbudget reads ``indexer_kv_dtype`` for Qwen4-Exp only (DeepSeek-V3.2's fp8 and
    MiniMax-M3's bf16 defaults are modelled, other values are not)."""
    with pytest.raises(ConfigError, match=r"^attention_config: indexer_kv_dtype 'fp8' for qwen2"):
        _plan("Qwen/Qwen2.5-7B", attention_config=FP8_INDEXER)
