"""Three budgets that are never substituted for one another (the seed's 结构估算 / 缓存池 / 整机峰值).

1. **Structural**: how big the K/V data is by the model's structure alone (engine-neutral; no
   blocks, no padding, no per-rank replication). Answers "how large is the data".
2. **Engine pool**: what the engine actually allocates for KV on each GPU
   (``num_blocks x page x group_size``, from :mod:`kvbudget.capacity.pool`).
3. **Device peak**: everything on one GPU at its peak: CUDA context + weights + activation +
   non-torch + CUDA graphs + the KV pool, against device memory, with a stated headroom for
   fragmentation and workspace. Only this one says how close the GPU is to OOM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbudget.capacity.dtypes import KV_DTYPES, get_kv_dtype
from kvbudget.capacity.layouts.base import Layout
from kvbudget.capacity.memory import CUDA_CONTEXT_BYTES, REDUNDANCY_BUFFER_BYTES
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.spec.layers import cache_parts
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer
from kvbudget.units import GiB, format_bytes


@dataclass(frozen=True, slots=True)
class StructuralBudget:
    bytes_per_token: int
    bytes_per_sequence: int
    num_sequences: int
    total_bytes: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes_per_token": self.bytes_per_token,
            "bytes_per_sequence": self.bytes_per_sequence,
            "num_sequences": self.num_sequences,
            "total_bytes": self.total_bytes,
            "total_gib": round(self.total_bytes / GiB, 3),
            "method": self.method,
        }


@dataclass(frozen=True, slots=True)
class DevicePeak:
    pp_rank: int
    device_bytes: int
    cuda_context_bytes: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    kv_pool_bytes: int
    margin_bytes: int

    @property
    def peak_bytes(self) -> int:
        return (
            self.cuda_context_bytes
            + self.weights_bytes
            + self.activation_bytes
            + self.non_torch_bytes
            + self.cudagraph_bytes
            + self.kv_pool_bytes
        )

    @property
    def headroom_bytes(self) -> int:
        return self.device_bytes - self.peak_bytes

    @property
    def ok(self) -> bool:
        return self.headroom_bytes >= self.margin_bytes

    def headroom_text(self) -> str:
        """The headroom as a verdict a reader takes the right way: more than the margin is
        fine, less is tight, below zero does not fit (issue #32 item 5: "headroom 3.48 GiB is
        within the 2.54 GiB margin" read as a problem)."""
        room, margin = self.headroom_bytes, format_bytes(self.margin_bytes)
        if room < 0:
            return (
                f"over the device by {format_bytes(-room)}: does not fit (and the {margin} "
                "safety margin comes on top)"
            )
        if self.ok:
            return f"headroom {format_bytes(room)}, more than the {margin} safety margin: ok"
        return (
            f"headroom {format_bytes(room)}, less than the {margin} safety margin: tight "
            "(fragmentation and workspace may not fit)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "pp_rank": self.pp_rank,
            "device_bytes": self.device_bytes,
            "cuda_context_bytes": self.cuda_context_bytes,
            "weights_bytes": self.weights_bytes,
            "activation_bytes": self.activation_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "cudagraph_bytes": self.cudagraph_bytes,
            "kv_pool_bytes": self.kv_pool_bytes,
            "peak_bytes": self.peak_bytes,
            "peak_gib": round(self.peak_bytes / GiB, 2),
            "headroom_bytes": self.headroom_bytes,
            "margin_bytes": self.margin_bytes,
            "ok": self.ok,
        }


@dataclass(frozen=True, slots=True)
class ThreeBudgets:
    structural: StructuralBudget
    engine_pool_bytes_per_rank: tuple[int, ...]
    engine_pool_bytes_replica: int
    engine_pool_tokens: int
    device_peak: tuple[DevicePeak, ...]
    headroom_fraction: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "structural": self.structural.to_dict(),
            "engine_pool": {
                "bytes_per_rank": list(self.engine_pool_bytes_per_rank),
                "bytes_replica": self.engine_pool_bytes_replica,
                "tokens": self.engine_pool_tokens,
                "method": "num_blocks x page x group_size per GPU (engine arithmetic)",
            },
            "device_peak": [d.to_dict() for d in self.device_peak],
            "headroom_fraction": self.headroom_fraction,
            "margin_method": (
                f"headroom_fraction x device memory + {REDUNDANCY_BUFFER_BYTES // (1 << 20)} MiB "
                "(vLLM's redundancy buffer) for fragmentation and workspace"
            ),
        }


def _element_bytes(kv_dtype: str, model: ModelSpec, engine: Layout) -> tuple[int, str]:
    # a plan's kv_dtype is already resolved (``--dtype float32`` with ``auto`` KV gives
    # "float32", which is no --kv-cache-dtype name): take it as resolved
    resolved = KV_DTYPES.get(kv_dtype) if kv_dtype == "float32" else None
    dtype = resolved or get_kv_dtype(kv_dtype, engine=engine, model_dtype=model.torch_dtype)
    if dtype.nvfp4:
        return 1, f"{dtype.name}: counted as 1 B per element (structural ignores packing)"
    return max(
        1, int(dtype.element_bytes)
    ), f"{dtype.name}: {int(dtype.element_bytes)} B per element"


def structural_budget(
    model: ModelSpec, *, kv_dtype: str, engine: Layout, num_tokens: int, num_sequences: int
) -> StructuralBudget:
    """Engine-neutral bytes for ``num_sequences`` sequences of ``num_tokens`` tokens (whole model)."""
    elem, how = _element_bytes(kv_dtype, model, engine)
    state_elem = model.dtype_bytes or 2
    runs = list(model.layer_runs())
    per_token = sum(layer.bytes_per_token(elem) * len(indices) for layer, indices in runs)
    per_seq = 0
    for run, indices in runs:
        for layer in cache_parts((run,)):  # a parallel hybrid layer: attention and state
            if isinstance(layer, StateLayer):
                per_seq += layer.bytes_per_state(state_elem if state_elem != 4 else 2) * len(
                    indices
                )
            else:
                per_seq += layer.bytes_per_sequence(num_tokens, elem) * len(indices)
    return StructuralBudget(
        bytes_per_token=per_token,
        bytes_per_sequence=per_seq,
        num_sequences=num_sequences,
        total_bytes=per_seq * num_sequences,
        method=(
            f"sum over layers of kept tokens x K/V elements x element bytes ({how}); windows bound "
            "sliding layers, state layers count once per sequence; no blocks, padding or TP replication"
        ),
    )


def three_budgets(plan: PlanResult, model: ModelSpec) -> ThreeBudgets:
    """The three budgets of a plan; the structural one is for ``floor(max_concurrency)`` max-length sequences."""
    num_seqs = max(1, int(plan.max_concurrency))
    structural = structural_budget(
        model,
        kv_dtype=plan.kv_dtype,
        engine=plan.engine,
        num_tokens=plan.max_model_len,
        num_sequences=num_seqs,
    )
    margin = int(plan.gpu.memory_bytes * plan.headroom_fraction) + REDUNDANCY_BUFFER_BYTES
    peaks: list[DevicePeak] = []
    pool_bytes: list[int] = []
    for rank in plan.ranks:
        pool = rank.kv_pool_bytes
        pool_bytes.append(pool)
        if not plan.device_given:  # --kv-cache-memory without a device: no peak to compare
            continue
        peaks.append(
            DevicePeak(
                pp_rank=rank.pp_rank,
                device_bytes=plan.gpu.memory_bytes,
                cuda_context_bytes=CUDA_CONTEXT_BYTES,
                weights_bytes=rank.weights.num_bytes,
                activation_bytes=rank.activation.num_bytes,
                non_torch_bytes=rank.non_torch.num_bytes,
                cudagraph_bytes=rank.cudagraph.num_bytes,
                kv_pool_bytes=pool,
                margin_bytes=margin,
            )
        )
    return ThreeBudgets(
        structural=structural,
        engine_pool_bytes_per_rank=tuple(pool_bytes),
        engine_pool_bytes_replica=sum(pool_bytes) * plan.tp,
        engine_pool_tokens=plan.kv_cache_tokens,
        device_peak=tuple(peaks),
        headroom_fraction=plan.headroom_fraction,
    )
