"""The KV cache llama.cpp really allocates, against the numbers we compute.

Independent source: the server's own trace log (``-lv 4``), e.g.
``llama_kv_cache: size =    4.25 MiB (  2048 cells,   4 layers,  4/4 seqs), K (q8_0):    2.12 MiB, ...``
Two things are compared with it, for f16 / q8_0 / q4_0 caches, 1, 3 and 4 slots and several
context sizes, to the printed precision (``%7.2f`` of a float, glibc rounds exact halves to even,
as Python's ``format`` does):

* the rules worked by hand below (from ``src/llama-context.cpp`` and ``src/llama-kv-cache*.cpp``,
  see ``shared/reference/llamacpp.md`` §3-4): does our understanding of the engine hold?
* the calculator's ``llamacpp`` layout (``kvbudget.capacity.layouts.llamacpp``): does the tool
  the user runs print what the engine allocates?
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.llamacpp

MIB = 1024 * 1024
# Tiny model dims (scripts/tiny_gguf.py): 4 layers, 2 KV heads x head_dim 32.
NUM_LAYERS = 4
KV_ROW_ELEMENTS = 2 * 32  # n_embd_k_gqa = n_embd_v_gqa
# ggml row bytes for 64 elements: f16 2 B/elt; q8_0 blocks of 32 = 32 B + fp16 scale = 34 B;
# q4_0 blocks of 32 = 16 B of nibbles + fp16 scale = 18 B.
ROW_BYTES = {"f16": 64 * 2, "q8_0": 2 * 34, "q4_0": 2 * 18}
N_UBATCH = 512  # llama-server default -ub


def pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n


def printed(nbytes: int) -> str:
    """What ``%7.2f`` prints for ``(float) nbytes / (1024.0f * 1024.0f)``, stripped."""
    value = np.float32(nbytes) / np.float32(1024.0 * 1024.0)
    return f"{float(value):.2f}"


def assert_serves_completion(server: Any) -> None:
    """The tiny model really serves: four tokens of a completion (random weights, so gibberish)."""
    answer = server.post_json(
        "/v1/completions", {"prompt": "word " * 40, "max_tokens": 4, "ignore_eos": True}
    )
    assert answer["usage"]["completion_tokens"] == 4


@dataclass(frozen=True)
class Case:
    ctk: str
    ctv: str
    num_slots: int
    ctx_tokens: int
    extra: tuple[str, ...] = ()
    unified: bool = False

    @property
    def id(self) -> str:
        u = "-kvu" if self.unified else ""
        return (
            f"{self.ctk}-{self.ctv}-np{self.num_slots}-c{self.ctx_tokens}{u}{''.join(self.extra)}"
        )

    def args(self) -> list[str]:
        a = ["-c", str(self.ctx_tokens), "-np", str(self.num_slots), "-t", "2"]
        a += ["-ctk", self.ctk, "-ctv", self.ctv, *self.extra]
        if self.unified:
            a.append("-kvu")
        return a


def hand_cells(case: Case) -> tuple[int, int]:
    """(cells per stream, streams): n_ctx padded to 256; per-slot streams unless unified."""
    n_ctx = pad(case.ctx_tokens, 256)
    if case.unified:
        return n_ctx, 1
    return pad(n_ctx // case.num_slots, 256), case.num_slots


CASES = [
    Case("f16", "f16", 4, 8192),
    Case("q8_0", "q8_0", 4, 8192),  # fa auto -> enabled for the quantized V cache
    Case("q4_0", "q4_0", 4, 8192, ("-fa", "on")),
    Case("f16", "f16", 3, 8192),  # 8192/3 = 2730 -> 2816 cells per slot
    Case("q8_0", "f16", 3, 5000, ("-fa", "off")),  # quantized K alone works without FA
    Case("f16", "f16", 1, 3000),
    Case("q4_0", "q4_0", 1, 1000),
    Case("q8_0", "q8_0", 4, 6000, (), True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kv_log_matches_hand_rules_and_calculator(
    case: Case, llamacpp: Any, start_llama_server: Any
) -> None:
    model = llamacpp.model("llama")
    server = start_llama_server(model, *case.args())
    lines = server.kv_lines()
    assert len(lines) == 1, f"expected one KV cache line, got {lines} (log {server.log_path})"
    line = lines[0]

    cells, streams = hand_cells(case)
    k_bytes = NUM_LAYERS * cells * streams * ROW_BYTES[case.ctk]
    v_bytes = NUM_LAYERS * cells * streams * ROW_BYTES[case.ctv]
    # Independent rules against the engine.
    assert (line.cells, line.streams, line.seqs, line.layers) == (
        cells,
        streams,
        case.num_slots,
        NUM_LAYERS,
    )
    assert (line.k_type, line.v_type) == (case.ctk, case.ctv)
    assert line.k_mib == printed(k_bytes)
    assert line.v_mib == printed(v_bytes)
    assert line.total_mib == printed(k_bytes + v_bytes)
    assert line.buffer_mib == f"{(k_bytes + v_bytes) / MIB:.2f}"

    # The calculator against the engine.
    layout = calc_llamacpp(model, case)
    result = layout(case.ctk, case.ctv)
    (group,) = result.stages[0].groups
    assert (group.kind, group.num_layers, group.tokens_kept) == ("full", line.layers, line.cells)
    assert group.note == f"{line.cells} cells x {line.streams} streams"
    assert printed(result.total_bytes) == line.total_mib
    # K and V separately, as the server logs them.
    kv = calc_llamacpp_kv(model, case)
    assert (kv.k_type, kv.v_type) == (line.k_type, line.v_type)
    assert (printed(kv.k_bytes), printed(kv.v_bytes)) == (line.k_mib, line.v_mib)
    assert (kv.cells_per_stream, kv.streams) == (line.cells, line.streams)

    # And `kvbudget calc` given the server's own flags (-c, -np, -kvu, -ctk, -ctv).
    doc = calc_cli_json(model, case)
    assert printed(doc["total_bytes"]) == line.total_mib
    assert printed(doc["llamacpp"]["k_bytes"]) == line.k_mib
    assert printed(doc["llamacpp"]["v_bytes"]) == line.v_mib
    assert doc["llamacpp"]["cells_per_stream"] == line.cells


SWA_TOKENS = 128
SWA_CASES = [
    Case("f16", "f16", 4, 8192),
    Case("q8_0", "q8_0", 2, 4096),
    Case("f16", "f16", 2, 4096, (), True),
]


@pytest.mark.parametrize("case", SWA_CASES, ids=[c.id for c in SWA_CASES])
def test_sliding_window_kv_log(case: Case, llamacpp: Any, start_llama_server: Any) -> None:
    """Gemma-2 layout: layers 0, 2 slide (own, smaller cache), layers 1, 3 are full attention."""
    model = llamacpp.model("gemma2", sliding_window_tokens=SWA_TOKENS)
    server = start_llama_server(model, *case.args())
    lines = server.kv_lines()
    assert [ln.cache for ln in lines] == ["non-SWA", "SWA"], f"log {server.log_path}: {lines}"
    full, swa = lines
    # The sliding-window model really serves (a prompt longer than the window).
    answer = server.post_json(
        "/v1/completions", {"prompt": "word " * 300, "max_tokens": 4, "ignore_eos": True}
    )
    assert answer["usage"]["completion_tokens"] == 4
    assert answer["usage"]["prompt_tokens"] > SWA_TOKENS
    cells, streams = hand_cells(case)
    # src/llama-kv-cache-iswa.cpp: size_swa = PAD(min(size_base, n_swa*(unified ? n_seq_max : 1) + n_ubatch), 256)
    swa_cells = pad(
        min(cells, SWA_TOKENS * (case.num_slots if case.unified else 1) + N_UBATCH), 256
    )
    for line, n_cells in ((full, cells), (swa, swa_cells)):
        k_bytes = 2 * n_cells * streams * ROW_BYTES[case.ctk]
        v_bytes = 2 * n_cells * streams * ROW_BYTES[case.ctv]
        assert (line.cells, line.streams, line.layers) == (n_cells, streams, 2)
        assert (line.k_mib, line.v_mib) == (printed(k_bytes), printed(v_bytes))
        assert line.total_mib == printed(k_bytes + v_bytes)

    result = calc_llamacpp(model, case)(case.ctk, case.ctv)
    groups = {g.kind: g for g in result.stages[0].groups}
    assert sorted(groups) == ["full", "sliding"]
    for kind, line in (("full", full), ("sliding", swa)):
        g = groups[kind]
        assert (g.num_layers, g.tokens_kept) == (line.layers, line.cells)
        assert printed(g.bytes_total) == line.total_mib
    # K and V summed over both caches, as the two log lines give them
    kv = calc_llamacpp_kv(model, case)
    assert kv.k_bytes == sum(2 * n * streams * ROW_BYTES[case.ctk] for n in (cells, swa_cells))
    assert kv.v_bytes == sum(2 * n * streams * ROW_BYTES[case.ctv] for n in (cells, swa_cells))
    assert printed(result.total_bytes) == printed(
        sum(
            2 * n * streams * (ROW_BYTES[case.ctk] + ROW_BYTES[case.ctv])
            for n in (cells, swa_cells)
        )
    )


def calc_llamacpp(model_gguf: Path, case: Case) -> Any:
    """The calculator's ``llamacpp`` layout for the model's HF config and the server flags."""
    from kvbudget.capacity.layouts.llamacpp import llamacpp_layout
    from kvbudget.spec.resolve import resolve_model

    resolved = resolve_model(str(model_gguf.with_suffix(".config.json")))
    assert resolved.spec is not None, resolved
    return lambda ctk, ctv: llamacpp_layout(
        resolved.spec,
        tokens=case.ctx_tokens // case.num_slots,
        seqs=case.num_slots,
        kv_dtype=ctk,
        v_dtype=ctv,
        ctx_size=case.ctx_tokens,
        unified=case.unified,
    )


def calc_llamacpp_kv(model_gguf: Path, case: Case) -> Any:
    """The calculator's K and V bytes for the server flags."""
    from kvbudget.capacity.layouts.llamacpp import llamacpp_kv_split
    from kvbudget.spec.resolve import resolve_model

    resolved = resolve_model(str(model_gguf.with_suffix(".config.json")))
    assert resolved.spec is not None, resolved
    return llamacpp_kv_split(
        resolved.spec,
        tokens=case.ctx_tokens // case.num_slots,
        seqs=case.num_slots,
        kv_dtype=case.ctk,
        v_dtype=case.ctv,
        ctx_size=case.ctx_tokens,
        unified=case.unified,
    )


def calc_cli_json(model_gguf: Path, case: Case) -> Any:
    """``kvbudget calc --json`` with llama.cpp's flags, through the real entry point."""
    import contextlib
    import io
    import json

    from kvbudget.cli.main import main

    argv = ["calc", "--model", str(model_gguf.with_suffix(".config.json")), "--json"]
    argv += ["--engine", "llamacpp", "--ctx-size", str(case.ctx_tokens)]
    argv += ["--parallel", str(case.num_slots), "--cache-type-k", case.ctk]
    argv += ["--cache-type-v", case.ctv] + (["--kv-unified"] if case.unified else [])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code in (0, None), out.getvalue()
    return json.loads(out.getvalue())
