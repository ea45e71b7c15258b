"""The vLLM server flags of InferenceX's scripts, as ``scripts/inferencex_server_flags.py`` reads
them and ``bench/gpu_accuracy.py`` applies them to a silicon row.

The script texts below are excerpts of InferenceX's own scripts (SemiAnalysisAI/InferenceX):
``benchmarks/70b_fp8_h200_slurm.sh`` at 9596d23d7 (a ``--config`` YAML plus CLI flags) and
``benchmarks/single_node/minimaxm2.5_fp8_b200.sh`` at 235b232d2 (CLI flags only, a formula of
``ISL``). Expected values by hand from those lines."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

LLAMA_H200 = """\
cat > config.yaml << EOF
kv-cache-dtype: fp8
async-scheduling: true
no-enable-prefix-caching: true
max-num-batched-tokens: 8192
max-model-len: $CALCULATED_MAX_MODEL_LEN
EOF
# --max-num-seqs 4 would be a comment
PYTHONNOUSERSITE=1 vllm serve $MODEL --host 0.0.0.0 --port $PORT --config config.yaml \\
 --gpu-memory-utilization 0.9 --tensor-parallel-size $TP --max-num-seqs $CONC  \\
 --disable-log-requests > $SERVER_LOG 2>&1 &
"""

MINIMAX_B200 = """\
vllm serve $MODEL --port $PORT \\
--tensor-parallel-size=$TP \\
$EP \\
--gpu-memory-utilization 0.90 \\
--max-model-len $MAX_MODEL_LEN \\
--block-size=32 \\
--kv-cache-dtype fp8 \\
--max-cudagraph-capture-size 2048 \\
--max-num-batched-tokens "$((ISL * 2 ))" \\
--stream-interval 20 --no-enable-prefix-caching \\
--trust-remote-code > $SERVER_LOG 2>&1 &
"""


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (  # a --config YAML and CLI flags
            LLAMA_H200,
            {
                "kv_dtype": "fp8",
                "gpu_memory_utilization": 0.9,
                "max_num_seqs": "concurrency",
                "max_num_batched_tokens": 8192,
                "async_scheduling": True,
            },
        ),
        (  # CLI flags only, one a formula of ISL
            MINIMAX_B200,
            {
                "kv_dtype": "fp8",
                "gpu_memory_utilization": 0.9,
                "max_num_batched_tokens": "2 x isl",
                "block_size": 32,
            },
        ),
    ],
    ids=["llama-h200", "minimax-b200"],
)
def test_flags_of_a_script(script: str, expected: dict[str, object]) -> None:
    reader = _load(REPO / "scripts" / "inferencex_server_flags.py", "inferencex_server_flags")
    flags, ambiguous = reader.flags_of(script)
    assert flags == expected
    assert ambiguous == []


def test_a_flag_set_two_ways_is_ambiguous_and_left_out() -> None:
    reader = _load(REPO / "scripts" / "inferencex_server_flags.py", "inferencex_server_flags")
    branches = 'if [ "$TP" = 8 ]; then\n  KV="--kv-cache-dtype fp8"\nelse\n  KV="--kv-cache-dtype auto"\nfi\n'
    flags, ambiguous = reader.flags_of(branches + MINIMAX_B200.replace("--kv-cache-dtype fp8 ", ""))
    assert "kv_dtype" not in flags
    assert ambiguous == ["kv-cache-dtype"]


def test_a_row_gets_its_flags_with_the_formulas_resolved(tmp_path: Path) -> None:
    """``$CONC`` is the row's concurrency, ``$((ISL * 2))`` twice its input length; a row that
    names no vLLM version takes its workflow's image version; a row without a script keeps
    kvbudget's defaults."""
    bench = _load(REPO / "bench" / "gpu_accuracy.py", "gpu_accuracy")
    flags = {
        "rows": {
            "llama": {
                "script": "benchmarks/70b_fp8_h200_slurm.sh",
                "commit": "9596d23d74e9e1e4f4bcdb27572c87cafb746a02",
                "flags": {"kv_dtype": "fp8", "max_num_seqs": "concurrency"},
                "engine_version": "0.10.2",
            },
            "minimax": {
                "script": "benchmarks/single_node/minimaxm2.5_fp8_b200.sh",
                "commit": "235b232d2",
                "flags": {"max_num_batched_tokens": "2 x isl", "block_size": 32},
                "changed_during_day": ["kv_dtype"],
            },
            "branch": {"script": None, "reason": "no script on main"},
        }
    }
    path = tmp_path / "flags.json"
    path.write_text(json.dumps(flags), encoding="utf-8")
    bench.SERVER_FLAGS = path
    llama = {"id": "llama", "batch_size": "64", "isl": "8192"}
    minimax = {"id": "minimax", "batch_size": "256", "isl": "8192"}
    assert bench.server_flags(llama) == {"kv_dtype": "fp8", "max_num_seqs": 64}
    assert bench.server_flags(minimax) == {"max_num_batched_tokens": 16384, "block_size": 32}
    assert bench.server_flags({"id": "branch", "batch_size": "4", "isl": "1024"}) == {}
    assert bench.server_flags({"id": "qwen", "batch_size": "4", "isl": "1024"}) == {}
    record = bench._server_record(minimax)
    assert record["not_applied"] == ["kv_dtype"]
    assert bench._server_record(llama)["engine_version"] == "0.10.2"


def test_a_rows_plan_request_carries_its_flags_and_version(tmp_path: Path) -> None:
    """What the simulator is given for a Llama-3.1-70B row that names no vLLM version: the
    script's fp8 KV cache, ``$CONC`` as max_num_seqs, its async scheduling, and the image's
    vLLM 0.10.2 (bench/gpu_accuracy.py ``_request``)."""
    bench = _load(REPO / "bench" / "gpu_accuracy.py", "gpu_accuracy")
    record = {
        "script": "benchmarks/70b_fp8_h200_slurm.sh",
        "commit": "9596d23d74e9e1e4f4bcdb27572c87cafb746a02",
        "flags": {"kv_dtype": "fp8", "max_num_seqs": "concurrency", "async_scheduling": True},
        "engine_version": "0.10.2",
    }
    path = tmp_path / "flags.json"
    path.write_text(json.dumps({"rows": {"llama": record}}), encoding="utf-8")
    bench.SERVER_FLAGS = path
    row = {
        "id": "llama", "model_path": "meta-llama/Llama-3.1-70B", "precision": "fp8",
        "system": "h200_sxm", "tp_size": "1", "attention_dp_size": "1", "backend_version": "",
        "isl": "8192", "osl": "1024", "batch_size": "64",
    }  # fmt: skip
    request = bench._request(row)
    assert request.engine_version == "0.10.2"
    assert (request.kv_dtype, request.max_num_seqs, request.async_scheduling) == ("fp8", 64, True)
    assert request.quantization == "fp8" and request.max_model_len == 8192 + 1024
    # a row that names its version keeps it, whatever the image
    assert bench._request({**row, "backend_version": "0.19.0"}).engine_version == "0.19.0"


def test_the_regime_of_one_engines_share() -> None:
    """By hand: 256 clients of 9,216 tokens need 2,359,296 tokens; two data-parallel engines
    take 128 each, 1,179,648 tokens, against each engine's own pool."""
    bench = _load(REPO / "bench" / "gpu_accuracy.py", "gpu_accuracy")
    assert bench.regime(256, 9216, 1, 2_359_295) == "kv-limited"
    assert bench.regime(256, 9216, 1, 2_359_296) == "below-knee"
    assert bench.regime(256, 9216, 2, 1_179_648) == "below-knee"
    assert bench.regime(256, 9216, 2, 1_179_647) == "kv-limited"
    assert bench.regime(5, 100, 2, 299) == "kv-limited"  # ceil(5 / 2) = 3 clients on one engine
