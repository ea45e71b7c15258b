"""MiniMax-M3's KV cache in the real llama-server, against the hand rule and the calculator.

llama.cpp (``LLAMACPP_SOURCE``, 0c1e570) serves MiniMax-M3 with ``llama_kv_cache_msa``, which the
server's trace log (``-lv 4``) prints as two caches::

    llama_kv_cache_msa: creating main KV cache, size = 2048 cells
    llama_kv_cache: size =    6.00 MiB (  2048 cells,   3 layers,  2/2 seqs), K (f16): ..., V ...
    llama_kv_cache_msa: creating indexer KV cache, size = 2048 cells
    llama_kv_cache: size =    1.50 MiB (  2048 cells,   2 layers,  2/2 seqs), K (f16): ..., V ...

The model is ``scripts/tiny_gguf.py --arch minimax-m3``: 3 layers (layer 0 leading dense, 1-2 MoE
with the MSA indexer), 2 KV heads x head_dim 64, indexer key length 32.

Expected values, independent of the code under test:

* the log lines themselves (the engine is the oracle);
* the hand rule from the source: ``src/llama-model.cpp`` lines 2375-2395 (the main cache over
  every layer, the indexer cache on layers ``il >= n_layer_dense_lead``, both of
  ``n_ctx_seq`` cells x ``n_seq_max`` streams unless unified); ``src/llama-kv-cache-msa.cpp``
  lines 38-49 (the indexer cache: ``n_head_kv = 1``, ``n_embd_head_k = indexer_head_size``, the
  same ``-ctk`` / ``-ctv`` types), ``src/llama-kv-cache.cpp`` (a V tensor of ``n_head_kv x
  head_dim`` = one 64-element row per indexer layer).

Compared to the printed precision as in ``test_llamacpp_kv_log.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.llamacpp.test_llamacpp_kv_log import (
    MIB,
    Case,
    calc_cli_json,
    calc_llamacpp,
    calc_llamacpp_kv,
    hand_cells,
    printed,
)

pytestmark = pytest.mark.llamacpp

# scripts/tiny_gguf.py TinyMsaDims: 3 layers, 1 leading dense layer, 2 KV heads x head_dim 64,
# indexer_head_size 32.
NUM_LAYERS = 3
INDEXED_LAYERS = 2  # il >= n_layer_dense_lead = 1
MAIN_ROW_ELEMENTS = 2 * 64  # n_head_kv x head_dim, K and V alike
INDEX_K_ROW_ELEMENTS = 1 * 32  # one head x indexer_head_size
INDEX_V_ROW_ELEMENTS = 1 * 64  # one head x head_dim (V is allocated for every non-MLA cache)
# ggml row bytes: f16 2 B per element; q8_0 34 B per block of 32; q4_0 18 B per block of 32.
BYTES_PER_BLOCK_OF_32 = {"f16": 64, "q8_0": 34, "q4_0": 18}


def row_bytes(cache_type: str, elements: int) -> int:
    assert elements % 32 == 0, elements
    return elements // 32 * BYTES_PER_BLOCK_OF_32[cache_type]


CASES = [
    Case("f16", "f16", 2, 4096),
    Case("q8_0", "q8_0", 4, 8192),  # fa auto -> enabled for the quantized V cache
    Case("q4_0", "q4_0", 1, 1000, ("-fa", "on")),
    Case("q8_0", "f16", 3, 5000, ("-fa", "off")),  # MSA falls back to dense; caches unchanged
    Case("q8_0", "q4_0", 2, 3000),
    Case("f16", "f16", 4, 6000, (), True),  # unified: one stream of 6144 cells
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_msa_kv_log_matches_hand_rule_and_calculator(
    case: Case, llamacpp: Any, start_llama_server: Any
) -> None:
    model = llamacpp.model("minimax-m3")
    server = start_llama_server(model, *case.args())
    lines = server.kv_lines()
    assert [ln.cache for ln in lines] == ["main", "indexer"], f"log {server.log_path}: {lines}"
    main, index = lines
    # The model really serves, past one MSA block (64 tokens).
    answer = server.post_json(
        "/v1/completions", {"prompt": "word " * 150, "max_tokens": 4, "ignore_eos": True}
    )
    assert answer["usage"]["completion_tokens"] == 4
    assert answer["usage"]["prompt_tokens"] > 64

    # The hand rule against the engine.
    cells, streams = hand_cells(case)
    n = cells * streams
    main_k = NUM_LAYERS * n * row_bytes(case.ctk, MAIN_ROW_ELEMENTS)
    main_v = NUM_LAYERS * n * row_bytes(case.ctv, MAIN_ROW_ELEMENTS)
    index_k = INDEXED_LAYERS * n * row_bytes(case.ctk, INDEX_K_ROW_ELEMENTS)
    index_v = INDEXED_LAYERS * n * row_bytes(case.ctv, INDEX_V_ROW_ELEMENTS)
    for line, layers, k_bytes, v_bytes in (
        (main, NUM_LAYERS, main_k, main_v),
        (index, INDEXED_LAYERS, index_k, index_v),
    ):
        assert (line.cells, line.streams, line.seqs, line.layers) == (
            cells,
            streams,
            case.num_slots,
            layers,
        ), line
        assert (line.k_type, line.v_type) == (case.ctk, case.ctv)
        assert (line.k_mib, line.v_mib) == (printed(k_bytes), printed(v_bytes)), line
        assert line.total_mib == printed(k_bytes + v_bytes)
        assert line.buffer_mib == f"{(k_bytes + v_bytes) / MIB:.2f}"

    # The calculator against the engine: one group of every layer, both caches in its bytes.
    result = calc_llamacpp(model, case)(case.ctk, case.ctv)
    (group,) = result.stages[0].groups
    assert (group.num_layers, group.tokens_kept) == (main.layers, main.cells)
    assert group.note == f"{main.cells} cells x {main.streams} streams"
    logged_total_mib = float(main.total_mib) + float(index.total_mib)
    assert abs(result.total_bytes / MIB - logged_total_mib) <= 0.01, (result.total_bytes, lines)
    assert printed(result.total_bytes) == printed(main_k + main_v + index_k + index_v)
    # K and V summed over both caches, as the two log lines give them.
    kv = calc_llamacpp_kv(model, case)
    assert (kv.k_type, kv.v_type) == (main.k_type, main.v_type)
    assert (kv.cells_per_stream, kv.streams) == (main.cells, main.streams)
    assert abs(kv.k_bytes / MIB - float(main.k_mib) - float(index.k_mib)) <= 0.01
    assert abs(kv.v_bytes / MIB - float(main.v_mib) - float(index.v_mib)) <= 0.01
    assert (kv.k_bytes, kv.v_bytes) == (main_k + index_k, main_v + index_v)

    # And `kvbudget calc` given the server's own flags.
    doc = calc_cli_json(model, case)
    assert doc["total_bytes"] == result.total_bytes
    assert (doc["llamacpp"]["k_bytes"], doc["llamacpp"]["v_bytes"]) == (kv.k_bytes, kv.v_bytes)
    assert doc["llamacpp"]["cells_per_stream"] == main.cells
