"""What to change so that one max-length request fits: each knob with its number (vLLM plans)."""

from __future__ import annotations

import math

from kvbudget.capacity.memory import RankMemory
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.units import GiB


def fit_remedies(
    request: PlanRequest,
    rank: RankMemory,
    needed: int,
    estimated: int | None,
    element_bytes: float,
    max_model_len: int,
    weights_quantization: str = "none",
) -> tuple[str, ...]:
    """Knobs that would make one max-length request fit, each with its number.

    When the weights alone take the memory the engine may use, no KV knob can help: fp8 KV is
    not offered then, and 16-bit weights get the knob that does work, fp8 weights
    (``--quantization fp8`` or an FP8 checkpoint: 1 B a linear weight instead of 2)."""
    out: list[str] = []
    weights = rank.weights.num_bytes
    weights_alone = weights >= rank.requested_bytes
    if weights_alone:
        out.append(
            f"the weights alone ({weights / GiB:.2f} GiB per GPU) take the "
            f"{rank.requested_bytes / GiB:.2f} GiB the engine may use at gpu_memory_utilization "
            f"{rank.gpu_memory_utilization:g}: a KV setting (fp8 KV, a shorter max_model_len) "
            "cannot make room"
        )
        if weights_quantization in ("none", ""):
            out.append(
                f"--quantization fp8 (or an FP8 checkpoint of the model) stores 16-bit weights in "
                f"1 B a linear weight: about {weights / 2 / GiB:.2f} GiB per GPU (check quality)"
            )
    if estimated:
        out.append(
            f"--max-model-len {estimated} (the longest request that fits; asked {max_model_len})"
        )
    if rank.kv_cache_memory_override:
        out.append(f"--kv-cache-memory >= {needed} bytes ({needed / GiB:.2f} GiB) per GPU")
    else:
        util = (rank.non_kv_bytes + needed) / rank.total_bytes
        if util <= 1.0:
            out.append(
                f"--gpu-memory-utilization >= {math.ceil(util * 100) / 100:.2f} "
                f"(needs {needed / GiB:.2f} GiB KV after {rank.non_kv_bytes / GiB:.2f} GiB non-KV)"
            )
        else:
            out.append(
                f"no utilization fits: non-KV {rank.non_kv_bytes / GiB:.2f} GiB + KV {needed / GiB:.2f} GiB "
                f"exceed the device's {rank.total_bytes / GiB:.2f} GiB"
            )
    if element_bytes >= 2 and not weights_alone:
        out.append(
            f"--kv-dtype fp8 halves the KV need to about {needed / 2 / GiB:.2f} GiB (check quality)"
        )
    out.append(f"--tp {request.tp * 2} splits weights and KV heads over twice the GPUs")
    return tuple(out)
