"""``kvbudget calc --engine llamacpp`` with llama.cpp's own flags (-c, -np, -kvu, -ctk, -ctv).

Expected values: the server's own KV log lines quoted in ``shared/reference/llamacpp.md`` §2
(tiny model: 4 layers, 2 KV heads x head_dim 32; every run ``-c 8192 -np 4`` unless noted),
printed by llama.cpp with ``%7.2f`` MiB, e.g.
``llama_kv_cache: size =    6.12 MiB (  2048 cells,   4 layers,  4/4 seqs), K (q8_0):    2.12 MiB,
V (f16):    4.00 MiB``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .helpers_calc import run_main

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 4,
    "intermediate_size": 512,
    "vocab_size": 128256,
    "max_position_embeddings": 4096,
    "torch_dtype": "float16",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}

# (flags, cells per stream, streams, seqs, K type, K MiB, V type, V MiB, total MiB) from §2
LOG_LINES = [
    (["-ctk", "f16", "-ctv", "f16"], 2048, 4, 4, "f16", "4.00", "f16", "4.00", "8.00"),
    (["-ctk", "q8_0", "-ctv", "q8_0"], 2048, 4, 4, "q8_0", "2.12", "q8_0", "2.12", "4.25"),
    (["-ctk", "q4_0", "-ctv", "q4_0"], 2048, 4, 4, "q4_0", "1.12", "q4_0", "1.12", "2.25"),
    (["-ctk", "q8_0", "-ctv", "f16"], 2048, 4, 4, "q8_0", "2.12", "f16", "4.00", "6.12"),
    (["-ctk", "f16", "-ctv", "f16", "-kvu"], 8192, 1, 4, "f16", "4.00", "f16", "4.00", "8.00"),
    (["-ctk", "f16", "-ctv", "f16", "-np", "3"], 2816, 3, 3, "f16", "4.12", "f16", "4.12", "8.25"),
]

SERVER_TO_CALC = {
    "-ctk": "--cache-type-k",
    "-ctv": "--cache-type-v",
    "-np": "--parallel",
    "-kvu": "--kv-unified",
}


def printed(nbytes: int) -> str:
    """``%7.2f`` of ``(float) nbytes / (1024 * 1024)`` (glibc rounds halves to even, as Python)."""
    return f"{float(np.float32(nbytes) / np.float32(1024.0 * 1024.0)):.2f}"


run = run_main


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return path


def calc_args(config: Path, server_flags: list[str]) -> list[str]:
    """The server's flags (``-c 8192 -np 4`` plus the case's), spelled as calc's flags."""
    flags = {"--ctx-size": "8192", "--parallel": "4"}
    it = iter(server_flags)
    for flag in it:
        if flag == "-kvu":
            flags["--kv-unified"] = ""
        else:
            flags[SERVER_TO_CALC[flag]] = next(it)
    argv = ["calc", "--model", str(config), "--engine", "llamacpp", "--json"]
    for name, value in flags.items():
        argv += [name] if value == "" else [name, value]
    return argv


@pytest.mark.parametrize("line", LOG_LINES, ids=[" ".join(x[0]) for x in LOG_LINES])
def test_calc_reproduces_the_server_kv_log_line(config: Path, line: tuple[Any, ...]) -> None:
    flags, cells, streams, seqs, k_type, k_mib, v_type, v_mib, total_mib = line
    code, out, err = run(calc_args(config, flags))
    assert code == 0, err
    doc = json.loads(out)
    kv = doc["llamacpp"]
    assert (kv["cells_per_stream"], kv["streams"], doc["seqs"]) == (cells, streams, seqs)
    assert (kv["k_type"], kv["v_type"]) == (k_type, v_type)
    assert (printed(kv["k_bytes"]), printed(kv["v_bytes"])) == (k_mib, v_mib)
    assert printed(doc["total_bytes"]) == total_mib
    assert kv["k_bytes"] + kv["v_bytes"] == doc["total_bytes"]
    assert kv["figure"] == "computed"


def test_ctx_size_sets_tokens_to_one_slot_and_table_shows_k_and_v(config: Path) -> None:
    argv = calc_args(config, ["-ctk", "q8_0", "-ctv", "f16"])
    argv.remove("--json")
    code, out, err = run(argv)
    assert code == 0, err
    # -c 8192 -np 4: a slot holds 2048 cells (reference §3)
    assert "2,048 tokens x 4 sequences" in out
    assert "2,048 cells x 4 streams = 8,192" in out
    # K: 4 layers x 8192 cells x 68 B (q8_0 row of 64) = 2,228,224 B; V: x 128 B = 4,194,304 B
    assert "K (q8_0)" in out and "2,228,224 B" in out
    assert "V (f16)" in out and "4,194,304 B" in out


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--engine", "vllm", "--ctx-size", "8192"], "ctx-size"),
        (["--kv-unified"], "kv-unified"),  # engine defaults to vllm
        (["--engine", "llamacpp", "--parallel", "2", "--seqs", "3"], "parallel"),
        (
            ["--engine", "llamacpp", "--cache-type-k", "q8_0", "--kv-dtype", "f16"],
            "cache-type-k",
        ),
        (["--engine", "llamacpp", "--ctx-size", "0"], "ctx-size"),
    ],
)
def test_llamacpp_flags_refused_one_line(config: Path, extra: list[str], field: str) -> None:
    code, out, err = run(["calc", "--model", str(config), "--tokens", "64", *extra])
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and out == ""
    assert len(lines) == 1 and lines[0].startswith("ConfigError:") and field in lines[0], lines
