"""llama.cpp's Dots3-Note cache (``dots3note``), worked by hand from llama.cpp 0c1e570
(llama-cpp-python 0.3.36 ``vendor/llama.cpp``), never from kvbudget:

* ``src/llama-arch.cpp`` line 115 names ``dots3note``; ``conversion/dots3.py`` line 18 registers
  ``Dots3NoteForCausalLM`` (a ``DeepseekV2Model``: ``head_count_kv = 1``, ``key_length =
  kv_lora_rank + qk_rope_head_dim`` = 512 + 64 = 576, ``conversion/deepseek.py`` lines 325-326,
  349-352), and writes ``sliding_window = sliding_window_size`` = 128, the sliding pattern from
  ``layer_types``, ``key_length_swa = swa_kv_lora_rank + swa_qk_rope_head_dim`` = 1024 + 64 =
  1,088 and ``indexer_types`` = every non-sliding layer (lines 126-143).
* ``src/llama-model.cpp`` lines 2562-2583: the main context builds ``llama_kv_cache_dsa_iswa``;
  ``src/llama-kv-cache-dsa-iswa.cpp`` lines 33-75: a ``llama_kv_cache_dsa`` over the non-sliding
  layers (``n_ctx_seq`` cells: the K-only latent, plus the indexer cache's K-only 128-wide rows,
  ``src/llama-kv-cache-dsa.cpp`` lines 31-53) and a plain ``llama_kv_cache`` over the sliding
  layers of ``GGML_PAD(min(n_ctx_seq, n_swa x (n_seq_max if -kvu else 1) + n_ubatch), 256)`` cells
  (line 53), K only (``src/llama-kv-cache.cpp`` lines 230-234, ``has_v = !is_mla``), rows of
  ``key_length_swa`` (read at ``src/llama-model.cpp`` line 1465), all ``-ctk``.
* The tiny config (``test_plan_dots3_vllm.py``'s, plus the two keys the converter reads as
  ``hparams[...]``): full layers 0, 1, 5, sliding 2, 3, 4, 6, 7.

f16 per cell: full 3 x (576 x 2 + 128 x 2) = 3,456 + 768 = 4,224 B; sliding 5 x 1,088 x 2 =
10,880 B. q8_0 (34 B per 32): 576 -> 612, 128 -> 136, 1,088 -> 1,156.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.llamacpp import llamacpp_kv_split, llamacpp_layout
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from tests.unit.config_files import write_config
from tests.unit.plan.test_plan_dots3_vllm import DOTS3 as VLLM_DOTS3

DOTS3: dict[str, Any] = {**VLLM_DOTS3, "swa_v_head_dim": 128, "swa_q_lora_rank": 1024}


def _spec(tmp_path: Path, **changes: Any) -> ModelSpec:
    spec = resolve_model(write_config(tmp_path, DOTS3, **changes)).spec
    assert spec is not None
    return spec


@pytest.mark.parametrize(
    ("seqs", "unified", "full_cells", "swa_cells", "streams"),
    [
        # -c 1000 -> 1,024 cells; SWA pad256(min(1,024, 128 + 512)) = 768
        (1, False, 1024, 768, 1),
        # -c 2000 -np 2: n_ctx 2,048, n_ctx_seq 1,024 per stream; SWA 768 per stream
        (2, False, 1024, 768, 2),
        # -kvu: one stream of 2,048; SWA pad256(min(2,048, 128 x 2 + 512)) = 768
        (2, True, 2048, 768, 1),
    ],
)
def test_f16_cells_worked_by_hand(
    tmp_path: Path, seqs: int, unified: bool, full_cells: int, swa_cells: int, streams: int
) -> None:
    spec = _spec(tmp_path)
    layout = llamacpp_layout(spec, tokens=1000, seqs=seqs, unified=unified)
    got = [(g.layer_indices, g.tokens_kept, g.bytes_per_token) for g in layout.groups()]
    assert [(list(i), c, b) for i, c, b in got] == [
        ([0, 1, 5], full_cells, 4_224),
        ([2, 3, 4, 6, 7], swa_cells, 10_880),
    ]
    want = (full_cells * 4_224 + swa_cells * 10_880) * streams
    assert layout.total_bytes == want
    kv = llamacpp_kv_split(spec, tokens=1000, seqs=seqs, unified=unified)
    assert (kv.k_bytes, kv.v_bytes) == (want, 0)


def test_q8_0(tmp_path: Path) -> None:
    # 1,024 x 3 x (612 + 136) + 768 x 5 x 1,156 = 2,297,856 + 4,439,040
    layout = llamacpp_layout(_spec(tmp_path), tokens=1000, seqs=1, kv_dtype="q8_0")
    assert layout.total_bytes == 2_297_856 + 4_439_040 == 6_736_896


def test_mixed_k_and_v_types_refused_as_llama_cpp_does(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="different K"):
        llamacpp_layout(_spec(tmp_path), tokens=100, seqs=1, kv_dtype="q8_0", v_dtype="f16")


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"swa_v_head_dim": None}, ("swa_v_head_dim", "hparams['swa_v_head_dim']")),
        ({"use_dsa": False}, ("use_dsa", "line 46")),
        ({"swa_qk_rope_head_dim": 32}, ("swa_qk_rope_head_dim", "lines 63-65")),
        ({"swa_q_lora_rank": 512}, ("swa_q_lora_rank", "lines 133-134")),
    ],
)
def test_configs_the_converter_refuses(
    tmp_path: Path, changes: dict[str, Any], words: tuple[str, ...]
) -> None:
    with pytest.raises(LayoutNotApplicable) as caught:
        llamacpp_layout(_spec(tmp_path, **changes), tokens=100, seqs=1)
    text = str(caught.value)
    assert "\n" not in text and "llama.cpp 0c1e570" in text
    for word in words:
        assert word in text


def test_transformers_text_format_names_llama_cpp(tmp_path: Path) -> None:
    text_cfg = {**DOTS3, "model_type": "dots3_note_text"}
    with pytest.raises(LayoutNotApplicable, match=r"dots3note, src/llama-arch.cpp line 115"):
        llamacpp_layout(_spec(tmp_path, **text_cfg), tokens=100, seqs=1)
