"""bench/gpu_accuracy.py reads which client measured a silicon row from its provenance and draws
the lengths that client drew. Expected values by hand from InferenceX's
``utils/bench_serving/benchmark_serving.py`` (``sample_random_requests``: ``lower = int(seq_len *
range_ratio)``, ``upper = seq_len``, ``np.random.randint(lower, upper + 1)``) with its workflows'
``RANDOM_RANGE_RATIO: 0.8``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_accuracy", REPO / "bench" / "gpu_accuracy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_client_from_provenance() -> None:
    bench = _bench()
    db = "db-dump/2026-04-27; config_id=733; silicon_concurrency=128; workflow_run_id=758"
    export = "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8; wip=False"
    gap = "source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv"
    kimi = "source_file=kimi-k2.5-gap-analysis.csv; silicon_concurrency=16"
    assert bench.client({"silicon_data_source": db}) == "inferencex"
    assert bench.client({"silicon_data_source": export}) == "inferencex"
    assert bench.client({"silicon_data_source": gap}) == "fixed"
    assert bench.client({"silicon_data_source": kimi}) == "fixed"


def test_inferencex_lengths_by_hand() -> None:
    bench = _bench()
    # 1,024 x 0.8 = 819.2 -> 819; 8,192 x 0.8 = 6,553.6 -> 6,553; the upper end is L itself
    assert bench._lengths(1024, "inferencex") == {"kind": "uniform", "low": 819, "high": 1024}
    assert bench._lengths(8192, "inferencex") == {"kind": "uniform", "low": 6553, "high": 8192}
    assert bench._lengths(1024, "fixed") == {"kind": "fixed", "value": 1024}
