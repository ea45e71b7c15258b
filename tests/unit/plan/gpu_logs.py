"""Loader of the 26 real vLLM 0.19.0 H100-80GB start-ups in ``tests/fixtures/vllm_gpu_logs``.

Each run gives the flags it was started with and what vLLM logged (facts with their source, see
that folder's README): the expected values of the pool tests come from these logs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_gpu_logs"


@dataclass(frozen=True)
class LoggedWorker:
    """One worker's ``Memory profiling takes ...`` line, GiB as logged (2 decimals)."""

    non_kv_gib: float
    activation_gib: float
    non_torch_gib: float
    weights_gib: float


@dataclass(frozen=True)
class LoggedRun:
    model: str
    config: Path
    status: str
    flags: dict[str, Any]
    total_gib: float
    workers: tuple[LoggedWorker, ...]
    available_kv_gib: float | None  # the tightest stage (rank 0 prints it)
    kv_tokens: int | None
    max_concurrency: float | None
    error: tuple[str, ...]

    @property
    def name(self) -> str:
        f = self.flags
        extra = "-".join(
            str(v)
            for v in (f["dtype"], f["kv_cache_dtype"], f["quantization"], f"dp{f['dp']}")
            if v not in ("bfloat16", "auto", "None", "dp1")
        )
        base = f"{self.model.split('/')[-1]}-tp{f['tp']}pp{f['pp']}-{f['max_model_len']}"
        return f"{base}-{extra}" if extra else base

    def request_fields(self, engine_version: str = "0.19.0") -> dict[str, Any]:
        f = self.flags
        return {
            "model": str(self.config),
            "gpu": "H100",
            "engine_version": engine_version,
            "tp": f["tp"],
            "pp": f["pp"],
            "max_model_len": f["max_model_len"],
            "gpu_memory_utilization": f["gpu_memory_utilization"],
            "kv_dtype": f["kv_cache_dtype"],
            "quantization": None if f["quantization"] == "None" else f["quantization"],
            "dtype": f["dtype"],
        }


def load_runs() -> list[LoggedRun]:
    out = []
    for raw in json.loads((FIXTURES / "runs.json").read_text("utf-8")):
        logged = raw["logged"]
        workers = tuple(
            LoggedWorker(*map(float, row))
            for row in (logged["profile_nonkv_peak_nontorch_weights"] or [])
        )
        conc = logged["max_concurrency"]
        out.append(
            LoggedRun(
                model=raw["model"],
                config=FIXTURES / raw["config"],
                status=raw["status"],
                flags=raw["flags"],
                total_gib=float(logged["total_memory_gib"]),
                workers=workers,
                available_kv_gib=logged["available_kv_gib_stage_min"],
                kv_tokens=int(logged["kv_tokens"]) if logged["kv_tokens"] else None,
                max_concurrency=float(conc[1]) if conc else None,
                error=tuple(logged["error"] or ()),
            )
        )
    return out


def started_runs() -> list[LoggedRun]:
    return [r for r in load_runs() if r.status == "ok"]
