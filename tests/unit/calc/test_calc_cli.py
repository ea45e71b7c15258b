"""``kvbudget calc`` / ``kvbudget models`` through the real entry point (one-line errors)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers_calc import CALC_LLAMA_8B, run_main

SEED = ["calc", *CALC_LLAMA_8B, "--seqs", "8"]


run = run_main


def test_seed_example_subprocess_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget", *SEED, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # 2 x 32 x 8 x 128 x 2 = 131,072 B/token; x 4096 = 536,870,912 per sequence; x 8 = 4,294,967,296
    assert doc["bytes_per_token"] == 131_072
    assert doc["bytes_per_sequence"] == 536_870_912
    assert doc["total_bytes"] == 4_294_967_296
    assert doc["total_gib"] == 4.0 and doc["per_sequence_mib"] == 512.0
    assert doc["status"] == "structural_reference"  # nothing confirmed yet
    assert len(doc["status_reasons"]) == 7
    assert {e["field"] for e in doc["ledger"]} >= {
        "layers",
        "kv_heads",
        "head_dim",
        "dtype_bytes",
        "tokens",
        "seqs",
    }


def test_seed_example_all_confirmed_is_exact_and_table_shows_bytes() -> None:
    code, out, _ = run([*SEED, "--assume", "all", "--json"])
    assert code == 0 and json.loads(out)["status"] == "exact"
    code, out, _ = run(SEED)
    assert code == 0 and "4,294,967,296" in out and "4.000000 GiB" in out


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--tokens", "0"], "tokens"),
        (["--tokens", "-5"], "tokens"),
        (["--tokens", "1.5"], "tokens"),
        (["--seqs", "0"], "seqs"),
        (["--layers", "abc"], "layers"),
        (["--dtype-bytes", "3"], "dtype_bytes"),
        (["--kv-heads", "2.5"], "kv-heads"),
    ],
)
def test_bad_explicit_values_one_line(argv: list[str], field: str) -> None:
    args = list(SEED)
    flag = argv[0]
    i = args.index(flag)
    args[i + 1] = argv[1]
    code, out, err = run(args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == ""
    assert len(lines) == 1 and lines[0].startswith("ConfigError:") and field in lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["calc", "--tokens", "4096"],  # neither mode
        ["calc", "--layers", "32", "--tokens", "4096"],  # incomplete explicit mode
        [*SEED, "--engine", "vllm"],  # model-only flag in explicit mode
        ["calc", "--model", "meta-llama/Llama-3.1-8B", "--layers", "32", "--tokens", "8"],  # mixed
        ["calc", "--model", "meta-llama/Llama-3.1-8B"],  # no tokens
        [
            "calc",
            "--model",
            "meta-llama/Llama-3.1-8B",
            "--tokens",
            "8",
            "--tp",
            "3",
        ],  # 3 vs 8 KV heads
        ["calc", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "8", "--kv-dtype", "q9"],
        ["calc", "--model", "nope/not-a-model-anywhere", "--tokens", "8"],
        ["calc", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "8", "--set", "oops"],
    ],
)
def test_invalid_usage_one_line(argv: list[str]) -> None:
    code, out, err = run(argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (out, err)
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].split(":")[0] in {"ConfigError", "SpecError", "UsageError"}


def test_model_mode_json_document() -> None:
    code, out, _ = run(
        ["calc", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "4096", "--seqs", "8", "--json"]
    )
    doc = json.loads(out)
    assert code == 0
    for key in (
        "status",
        "total_bytes",
        "bytes_per_token",
        "bytes_per_sequence",
        "total_gib",
        "groups",
        "per_rank",
        "assumptions",
        "ledger",
    ):
        assert key in doc
    assert (
        doc["status"] == "exact" and doc["total_bytes"] == 4_294_967_296 and doc["engine"] == "vllm"
    )
    engine = next(e for e in doc["ledger"] if e["field"] == "engine")
    assert engine["source"] == "default"


def test_not_applicable_exit_code_and_fields(tmp_path: object) -> None:
    code, out, _ = run(
        [
            "calc",
            "--model",
            "deepseek-ai/DeepSeek-V3",
            "--engine",
            "llamacpp",
            "--tokens",
            "64",
            "--json",
        ]
    )
    doc = json.loads(out)
    assert code == 3 and doc["status"] == "not_applicable" and doc["total_bytes"] is None


def test_tokens_above_max_position_is_flagged() -> None:
    code, out, _ = run(
        ["calc", "--model", "microsoft/Phi-3-mini-4k-instruct", "--tokens", "8192", "--json"]
    )
    tokens = next(e for e in json.loads(out)["ledger"] if e["field"] == "tokens")
    assert code == 0 and tokens["conflict"] and "max_position_embeddings=4096" in tokens["conflict"]


def test_models_lists_catalog() -> None:
    code, out, _ = run(["models", "--json"])
    doc = json.loads(out)
    assert code == 0 and len(doc["models"]) == 58  # test_calc_resolve says which
    gemma = next(m for m in doc["models"] if m["model_id"] == "google/gemma-3-1b-it")
    assert gemma["layer_kinds"] == {"sliding": 22, "full": 4}


def test_readme_confirmation_flags_make_it_exact() -> None:
    flags = [
        "--all-full-attention",
        "--identical-layers",
        "--independent-seqs",
        "--no-sliding-window",
        "--no-hybrid-state",
        "--no-quant-metadata",
        "--no-block-padding",
    ]
    code, out, _ = run([*SEED, *flags, "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["status"] == "exact" and doc["total_bytes"] == 4_294_967_296
    code, out, _ = run([*SEED, *flags[:-1], "--json"])
    assert json.loads(out)["status_reasons"] == [
        "no_block_padding: not confirmed (confirm with --assume no_block_padding)"
    ]
