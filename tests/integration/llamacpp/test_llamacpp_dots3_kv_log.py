"""Dots3-Note (``dots3note``) under the real llama-server: its log against hand rules and the
calculator.

Independent source: the server's own log. ``llama_kv_cache_dsa_iswa``
(``src/llama-kv-cache-dsa-iswa.cpp`` lines 33-75, llama.cpp 0c1e570) builds a
``llama_kv_cache_dsa`` (its MLA cache, then its indexer cache) over the full layers and a plain
``llama_kv_cache`` over the sliding layers; each logs ``llama_kv_cache: size = ... MiB (N cells,
L layers, s/S seqs), K (type): ... MiB, V (type): ...``. The hand rules for the tiny model of
``scripts/tiny_gguf_dots3.py`` (layers F F S S S F; full kv_lora_rank 128, sliding 256, rope 32;
indexer head 64; window 64):

* MLA cache: the 3 full layers, ``kv_lora_rank + qk_rope_head_dim`` = 160 elements of ``-ctk`` per
  cell, ``n_ctx_seq`` cells per stream;
* indexer cache: the same 3 layers, ``index_head_dim`` = 64 elements of ``-ctk`` per cell;
* SWA cache: the 3 sliding layers, ``swa_kv_lora_rank + qk_rope_head_dim`` = 288 elements of
  ``-ctk`` per cell (``key_length_swa``), ``GGML_PAD(min(n_ctx_seq, 64 x (n_seq if -kvu else 1) +
  n_ubatch 512), 256)`` cells per stream (line 53);
* no V anywhere (``src/llama-kv-cache.cpp`` lines 230-234, MLA).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.llamacpp.test_llamacpp_kv_log import (
    Case,
    assert_serves_completion,
    calc_llamacpp,
    calc_llamacpp_kv,
    hand_cells,
    pad,
    printed,
)
from tests.repo_scripts import load_script

pytestmark = pytest.mark.llamacpp

FULL_LAYERS = SWA_LAYERS = 3
LATENT, INDEX, SWA = 128 + 32, 64, 256 + 32
WINDOW, N_UBATCH = 64, 512
# ggml row bytes: f16 2 B per element; q8_0 34 B per block of 32
ROW = {
    "f16": {LATENT: 320, INDEX: 128, SWA: 576},
    "q8_0": {LATENT: 5 * 34, INDEX: 2 * 34, SWA: 9 * 34},
}

CASES = [
    Case("f16", "f16", 2, 2000),  # 1,024 cells x 2 streams; SWA pad256(min(1,024, 576)) = 768
    Case("q8_0", "q8_0", 1, 4096),  # 4,096 cells; SWA 768
    Case("f16", "f16", 2, 2048, (), True),  # -kvu: 2,048 x 1; SWA pad256(min(2,048, 640)) = 768
    Case("f16", "f16", 1, 512),  # 512 cells; SWA pad256(min(512, 576)) = 512
]


@pytest.fixture(scope="module")
def dots3_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = load_script("scripts/tiny_gguf_dots3.py").build_tiny_dots3_gguf
    path: Path = build(tmp_path_factory.mktemp("dots3-model") / "dots3note.gguf")
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_dots3_kv_log_matches_hand_rules_and_calculator(
    case: Case, dots3_model: Path, start_llama_server: Any
) -> None:
    server = start_llama_server(dots3_model, *case.args())
    lines = server.kv_lines()
    assert len(lines) == 3, f"expected the MLA, indexer and SWA caches, got {lines}"
    cells, streams = hand_cells(case)
    swa_cells = pad(min(cells, WINDOW * (case.num_slots if case.unified else 1) + N_UBATCH), 256)
    want = [
        (cells, FULL_LAYERS, FULL_LAYERS * cells * streams * ROW[case.ctk][LATENT]),
        (cells, FULL_LAYERS, FULL_LAYERS * cells * streams * ROW[case.ctk][INDEX]),
        (swa_cells, SWA_LAYERS, SWA_LAYERS * swa_cells * streams * ROW[case.ctk][SWA]),
    ]
    for line, (n_cells, layers, k_bytes) in zip(lines, want, strict=True):
        assert (line.cells, line.streams, line.layers) == (n_cells, streams, layers)
        assert (line.k_type, line.k_mib, line.v_mib) == (case.ctk, printed(k_bytes), "0.00")
    total = sum(k for _, _, k in want)
    if case.num_slots == 1 and case.ctk == "f16":  # the model really serves (indexer and all)
        assert_serves_completion(server)

    # the calculator against the engine
    result = calc_llamacpp(dots3_model, case)(case.ctk, case.ctv)
    got = [(g.kind, g.num_layers, g.tokens_kept) for g in result.stages[0].groups]
    assert got == [("mla", FULL_LAYERS, cells), ("mla", SWA_LAYERS, swa_cells)]
    assert result.total_bytes == total
    kv = calc_llamacpp_kv(dots3_model, case)
    assert (kv.k_bytes, kv.v_bytes) == (total, 0)
