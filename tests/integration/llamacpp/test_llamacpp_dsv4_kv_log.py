"""DeepSeek-V4 under the real llama-server: ``llama_kv_cache_dsv4``'s log against hand rules and
the calculator.

Independent source: the server's own log (llama.cpp 0c1e570). ``llama_kv_cache_dsv4``
(``src/llama-kv-cache-dsv4.cpp`` lines 1210-1336) logs, in order, its raw ``llama_kv_cache_iswa``
(a non-SWA cache of 0 layers, then the SWA cache of every layer), the CSA, HCA and indexer
``llama_kv_cache`` lines, then one ``llama_dsv4_comp_state: NAME ratio = R, state = S x E,
streams = N, rs_seq = 0, layers = L, size = X MiB`` line per compressor state. Hand rules for the
tiny model of ``scripts/tiny_gguf_dsv4.py`` (layers: 0 sliding, 1 and 3 CSA, 2 HCA; head_dim
128, indexer head 64, window 64; ``n_ubatch`` 512), ``kv_size = n_ctx_seq``, one stream per
sequence even with ``-kvu``:

* raw: ``pad256(min(kv_size, 64 + 512))`` cells x 4 layers x a 128 row (K only, V 0);
* CSA: ``pad256(ceil(kv_size / 4))`` cells x 2 layers x 128; indexer: same cells x 2 x 64;
* HCA: ``pad256(ceil(kv_size / 128))`` cells x 1 layer x 128;
* f32 states per stream: CSA 2 x 2 layers x (2 x 128) x 8 x 4 B, HCA 2 x 1 x 128 x 128 x 4 B,
  indexer 2 x 2 x (2 x 64) x 8 x 4 B.
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
    pad,
    printed,
)
from tests.repo_scripts import load_script

pytestmark = pytest.mark.llamacpp

ROW = {"f16": {128: 256, 64: 128}, "q8_0": {128: 4 * 34, 64: 2 * 34}}
STATE_RE = re.compile(
    r"llama_dsv4_comp_state: (?P<name>\w+) ratio = (?P<ratio>\d+), state = (?P<rows>\d+) x "
    r"(?P<dim>\d+), streams = (?P<streams>\d+), rs_seq = (?P<rs>\d+), layers = (?P<layers>\d+), "
    r"size = +(?P<mib>[\d.]+) MiB"
)

CASES = [
    Case("f16", "f16", 2, 1024),  # n_ctx_seq 512 x 2 streams
    Case("q8_0", "q8_0", 1, 4096),
    Case("f16", "f16", 2, 2048, (), True),  # -kvu: n_ctx_seq = n_ctx = 2048, still 2 streams
]


@pytest.fixture(scope="module")
def dsv4_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = load_script("scripts/tiny_gguf_dsv4.py").build_tiny_dsv4_gguf
    path: Path = build(tmp_path_factory.mktemp("dsv4-model") / "tiny-dsv4.gguf")
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_dsv4_kv_log_matches_hand_rules_and_calculator(
    case: Case, dsv4_model: Path, start_llama_server: Any
) -> None:
    server = start_llama_server(dsv4_model, *case.args())
    kv_size = pad(case.ctx_tokens, 256)
    if not case.unified:
        kv_size = pad(kv_size // case.num_slots, 256)
    streams = case.num_slots
    row = ROW[case.ctk]
    raw_cells = pad(min(kv_size, 64 + 512), 256)
    csa_cells = pad(-(-kv_size // 4), 256)
    hca_cells = pad(-(-kv_size // 128), 256)
    hand = [  # (cells, layers, K bytes) per llama_kv_cache line, in log order
        (kv_size, 0, 0),
        (raw_cells, 4, raw_cells * streams * 4 * row[128]),
        (csa_cells, 2, csa_cells * streams * 2 * row[128]),
        (hca_cells, 1, hca_cells * streams * 1 * row[128]),
        (csa_cells, 2, csa_cells * streams * 2 * row[64]),
    ]
    lines = server.kv_lines()
    assert len(lines) == len(hand), f"log {server.log_path}: {lines}"
    for line, (cells, layers, k_bytes) in zip(lines, hand, strict=True):
        assert (line.cells, line.layers) == (cells, layers)
        assert (line.k_mib, line.v_mib, line.total_mib) == (
            printed(k_bytes),
            "0.00",
            printed(k_bytes),
        )
    states = {m["name"]: m for m in STATE_RE.finditer(server.log_text())}
    state_bytes = {
        "csa": 2 * 2 * (2 * 128) * 8 * 4 * streams,
        "hca": 2 * 1 * 128 * 128 * 4 * streams,
        "lid": 2 * 2 * (2 * 64) * 8 * 4 * streams,
    }
    assert sorted(states) == sorted(state_bytes)
    for name, nbytes in state_bytes.items():
        assert (int(states[name]["streams"]), int(states[name]["rs"])) == (streams, 0)
        assert states[name]["mib"] == printed(nbytes)
    if case.num_slots == 2 and not case.unified:  # the model really serves
        assert_serves_completion(server)

    # the calculator against the engine: every cache and state, to the byte of the hand rules
    result = calc_llamacpp(dsv4_model, case)(case.ctk, case.ctv)
    groups = {g.kind: g for g in result.stages[0].groups}
    assert (groups["sliding"].tokens_kept, groups["sliding"].bytes_total) == (raw_cells, hand[1][2])
    assert groups["compressed_sparse"].bytes_total == hand[2][2] + hand[4][2]
    assert groups["heavily_compressed"].bytes_total == hand[3][2]
    assert groups["compressor_state"].bytes_total == sum(state_bytes.values())
    kv = calc_llamacpp_kv(dsv4_model, case)
    assert (kv.k_bytes, kv.v_bytes) == (sum(h[2] for h in hand), 0)
