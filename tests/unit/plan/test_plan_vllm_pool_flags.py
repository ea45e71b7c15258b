"""Every vLLM flag that changes the KV pool is a `plan` flag under vLLM's own name, and each one
moves the pool as vLLM's arithmetic says (worked by hand below).

The base case: Llama-3.1-8B (32 layers, 8 KV heads of 128, bf16), vLLM 0.32.0,
``--kv-cache-memory-bytes 16GiB`` (the budget itself, so the weights estimate plays no part),
``--max-model-len 8192``. One token costs 2 (K, V) x 8 x 128 x 2 bytes = 4,096 bytes per layer;
a 16-token block of all 32 layers 2 MiB; 16 GiB / 2 MiB = 8,192 blocks (vLLM: ``num_blocks =
available // page_size // num_layers``, docs/budget.md), 131,072 tokens, 8,192 / (8,192 / 16) =
16 requests of the full length. The mamba flags and ``--quantization`` have their own tests in
``test_plan_quantization_mamba.py``; ``--disable-hybrid-kv-cache-manager`` in the capacity tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kvbudget.cli.main import cli

REPO = Path(__file__).resolve().parents[3]
BASE = ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-80GB", "--engine", "vllm"]
BASE += ["--engine-version", "0.32.0", "--max-model-len", "8192", "--json"]
BUDGET = ["--kv-cache-memory-bytes", "16GiB"]
GIB = 1024**3
BLOCK_BYTES = 16 * 4096 * 32  # 16 tokens x 4,096 bytes x 32 layers


def plan(*args: str) -> dict[str, Any]:
    got = CliRunner().invoke(cli, ["plan", *BASE, *args])
    assert got.exit_code == 0, got.output
    doc: dict[str, Any] = json.loads(got.output)
    return doc


# flag(s) -> (num_blocks, kv_cache_tokens, max_concurrency), each worked by hand
CASES = {
    "base": ([], (8192, 131072, 16.0)),
    # a 32-token block costs twice as much: half the blocks, the same tokens
    "--block-size": (["--block-size", "32"], (4096, 131072, 16.0)),
    # fp8: one byte per element, twice the blocks
    "--kv-cache-dtype": (["--kv-cache-dtype", "fp8"], (16384, 262144, 32.0)),
    # the override replaces the count; concurrency 1,000 / 512 blocks a request
    "--num-gpu-blocks-override": (["--num-gpu-blocks-override", "1000"], (1000, 16000, 1.953125)),
    # 4 KV heads per rank: half the page, the same 16 GiB per GPU
    "--tensor-parallel-size": (["--tensor-parallel-size", "2"], (16384, 262144, 32.0)),
    # 16 layers per stage
    "--pipeline-parallel-size": (["--pipeline-parallel-size", "2"], (16384, 262144, 32.0)),
    # the pool is the same; a request needs 256 blocks instead of 512
    "--max-model-len": (["--max-model-len", "4096"], (8192, 131072, 32.0)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_vllm_pool_flag_moves_the_pool_by_hand(name: str) -> None:
    args, (blocks, tokens, concurrency) = CASES[name]
    doc = plan(*BUDGET, *args)
    assert (doc["num_blocks"], doc["kv_cache_tokens"]) == (blocks, tokens)
    assert doc["max_concurrency"] == pytest.approx(concurrency)


def test_gpu_memory_utilization_and_enforce_eager_by_hand() -> None:
    # no --kv-cache-memory-bytes: available = total x util - weights - activation - non-torch
    # - CUDA graphs; vLLM sees torch.cuda.mem_get_info's total of an H100-80GB, 79.19 GiB as
    # vLLM 0.19.0 logs it (tests/fixtures/vllm_gpu_logs), not nvidia-smi's 81,559 MiB
    terms = ["--weights-bytes", "16GiB", "--activation-bytes", "1GiB", "--non-torch-bytes", "0"]
    total = int(79.19 * GIB)
    half = int(total * 0.5)
    eager = plan("--gpu-memory-utilization", "0.5", "--enforce-eager", *terms)
    assert eager["available_kv_bytes"] == half - 17 * GIB
    assert eager["num_blocks"] == (half - 17 * GIB) // BLOCK_BYTES == 11568
    # with graphs (the default), vLLM 0.32 subtracts their estimate first
    graphs = plan("--gpu-memory-utilization", "0.5", "--cudagraph-bytes", "1GiB", *terms)
    assert graphs["num_blocks"] == (half - 18 * GIB) // BLOCK_BYTES
    full = plan("--gpu-memory-utilization", "0.9", "--enforce-eager", *terms)
    assert full["num_blocks"] == (int(total * 0.9) - 17 * GIB) // BLOCK_BYTES


def test_enforce_eager_with_graph_bytes_is_refused_in_one_line() -> None:
    args = ["plan", *BASE, *BUDGET, "--enforce-eager", "--cudagraph-bytes", "1GiB"]
    done = subprocess.run(
        [sys.executable, "-m", "kvbudget", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2 and not done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert "drop --cudagraph-bytes or --enforce-eager" in line


def test_the_pool_flag_table_names_only_flags_plan_has() -> None:
    """docs/budget.md lists vLLM 0.32's pool flags; every one marked as a plan flag is accepted by
    `plan` under vLLM's spelling, and every other one says why it is not."""
    text = (REPO / "docs" / "budget.md").read_text(encoding="utf-8")
    section = text.split("## vLLM flags that change the pool", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| `--")]
    assert len(rows) >= 15
    for row in rows:
        vllm_flag = re.match(r"\| `(--[a-z0-9-]+)`", row)
        assert vllm_flag, row
        cells = [c.strip() for c in row.strip("|").split("|")]
        if cells[1].startswith("`--"):
            got = CliRunner().invoke(cli, ["plan", vllm_flag.group(1), "--help"])
            assert "No such option" not in got.output, row
        else:
            assert cells[1].startswith("not modelled") or cells[1].startswith("no effect"), row
