"""DeepSeek-V3.2 / GLM-5 (DSA) under the real llama-server: its log against hand rules and the
calculator.

Independent source: the server's own log. ``llama_kv_cache_dsa`` (``src/llama-kv-cache-dsa.cpp``
lines 31-53, llama.cpp 0c1e570) builds two ``llama_kv_cache`` and each logs
``llama_kv_cache: size = ... MiB (N cells, L layers, s/S seqs), K (type): ... MiB, V (type): ...``:
first the MLA cache, then the indexer-key cache. The hand rules (``src/llama-kv-cache.cpp`` lines
230-234: K only for MLA; ``conversion/deepseek.py`` lines 325-326, 349-352) for the tiny model of
``scripts/tiny_gguf_dsa.py`` (4 layers, kv_lora_rank 128 + rope 32, indexer head 64):

* MLA cache: every layer, ``kv_lora_rank + qk_rope_head_dim`` = 160 elements of ``-ctk`` per cell;
* indexer cache: ``index_head_dim`` = 64 elements of ``-ctk`` per cell, on every layer
  (``deepseek32``; ``glm-dsa`` without ``indexer_types`` and n_ctx_train 4096 < 1,048,576) or on
  the ``indexer_types`` "full" layers (``glm-dsa``, ``src/llama-model.cpp`` line 2431);
* no V in either (``V (...): 0.00 MiB``), yet ``-ctk`` and ``-ctv`` must be equal
  (``src/llama-context.cpp`` lines 3835-3838): the last test shows the server's refusal and the
  calculator's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.llamacpp.test_llamacpp_kv_log import (
    Case,
    assert_serves_completion,
    calc_llamacpp,
    calc_llamacpp_kv,
    hand_cells,
    printed,
)
from tests.repo_scripts import load_script

pytestmark = pytest.mark.llamacpp

NUM_LAYERS = 4
LATENT = 128 + 32
INDEX = 64
# ggml row bytes: f16 2 B per element; q8_0 34 B per block of 32 (160 -> 5 blocks, 64 -> 2)
ROW = {"f16": {LATENT: 320, INDEX: 128}, "q8_0": {LATENT: 5 * 34, INDEX: 2 * 34}}

CASES = [
    ("deepseek32", None, Case("f16", "f16", 1, 8192)),
    ("deepseek32", None, Case("q8_0", "q8_0", 3, 8192)),  # 8192 / 3 -> 2816 cells x 3 streams
    ("glm-dsa", None, Case("f16", "f16", 1, 2048)),
    ("glm-dsa", "FSSF", Case("q8_0", "q8_0", 2, 4096, (), True)),
]


@pytest.fixture(scope="module")
def dsa_models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str | None], Path]:
    build = load_script("scripts/tiny_gguf_dsa.py").build_tiny_dsa_gguf
    root = tmp_path_factory.mktemp("dsa-models")
    return {
        (arch, types): build(root / f"{arch}-{types or 'all'}.gguf", arch=arch, indexer_types=types)
        for arch, types, _ in CASES
    }


@pytest.mark.parametrize(
    ("arch", "types", "case"), CASES, ids=[f"{a}-{t or 'all'}-{c.id}" for a, t, c in CASES]
)
def test_dsa_kv_log_matches_hand_rules_and_calculator(
    arch: str,
    types: str | None,
    case: Case,
    dsa_models: dict[tuple[str, str | None], Path],
    start_llama_server: Any,
) -> None:
    model = dsa_models[(arch, types)]
    server = start_llama_server(model, *case.args())
    lines = server.kv_lines()
    assert len(lines) == 2, f"expected the MLA and the indexer cache, got {lines}"
    main, index = lines
    cells, streams = hand_cells(case)
    indexed = NUM_LAYERS if types is None else types.count("F")
    main_bytes = NUM_LAYERS * cells * streams * ROW[case.ctk][LATENT]
    index_bytes = indexed * cells * streams * ROW[case.ctk][INDEX]
    for line, layers, k_bytes in ((main, NUM_LAYERS, main_bytes), (index, indexed, index_bytes)):
        assert (line.cells, line.streams, line.layers) == (cells, streams, layers)
        assert (line.k_type, line.k_mib, line.v_mib) == (case.ctk, printed(k_bytes), "0.00")
        assert line.total_mib == printed(k_bytes)
    if case.num_slots == 1 and case.ctk == "f16":  # the model really serves (indexer and all)
        assert_serves_completion(server)

    # the calculator against the engine
    result = calc_llamacpp(model, case)(case.ctk, case.ctv)
    (group,) = result.stages[0].groups
    assert (group.kind, group.num_layers, group.tokens_kept) == ("mla", NUM_LAYERS, cells)
    assert result.total_bytes == main_bytes + index_bytes
    assert printed(result.total_bytes) == printed(main_bytes + index_bytes)
    kv = calc_llamacpp_kv(model, case)
    assert (kv.k_bytes, kv.v_bytes) == (main_bytes + index_bytes, 0)
    assert (kv.cells_per_stream, kv.streams) == (cells, streams)


def test_mixed_k_and_v_types_refused_by_both(
    dsa_models: dict[tuple[str, str | None], Path], start_llama_server: Any
) -> None:
    """``-ctk f16 -ctv q8_0``: llama.cpp stops ("model does not support different K (f16) and V
    (q8_0) cache types"); the calculator refuses with the same words."""
    from kvbudget.errors import ConfigError
    from kvbudget.safety.servers import StartupExitError

    model = dsa_models[("deepseek32", None)]
    case = Case("f16", "q8_0", 1, 1024)
    with pytest.raises(StartupExitError) as server:
        start_llama_server(model, *case.args())
    words = "model does not support different K (f16) and V (q8_0) cache types"
    assert words in str(server.value)
    with pytest.raises(ConfigError, match=re.escape(words)):
        calc_llamacpp(model, case)(case.ctk, case.ctv)
