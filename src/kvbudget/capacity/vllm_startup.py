"""What vLLM sees and refuses at start-up: the device total, the max-length check, warm-up OOM.

Each rule cites the vLLM 0.19.0 file it comes from (docs/engine-facts.md).
"""

from __future__ import annotations

from typing import Any

from kvbudget.capacity.activation import ProfileActivation
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.units import GiB

#: ``torch.cuda.mem_get_info()`` total on an H100 80GB HBM3 as vLLM logs it
#: (``worker init memory snapshot: ... total_memory=79.19GiB``, every run of
#: ``tests/fixtures/vllm_gpu_logs``; vLLM 0.19.0 ``vllm/utils/mem_utils.py`` ``MemorySnapshot``
#: reads ``torch.cuda.mem_get_info``), not nvidia-smi's 81,559 MiB. Rounded to 0.01 GiB there.
TORCH_TOTAL_BYTES: dict[str, tuple[int, str]] = {
    "NVIDIA H100 80GB HBM3": (
        int(79.19 * GiB),
        "torch.cuda.mem_get_info total 79.19 GiB as vLLM 0.19.0 logs it on H100-80GB "
        "(tests/fixtures/vllm_gpu_logs), not nvidia-smi's 81,559 MiB",
    ),
}


def vllm_total_bytes(gpu: GpuSpec) -> tuple[int, str | None]:
    """The device total vLLM multiplies by ``gpu_memory_utilization``, and a note when it differs
    from the catalog figure. A ``--gpu-memory`` device is taken as given."""
    if gpu.custom:
        return gpu.memory_bytes, None
    known = TORCH_TOTAL_BYTES.get(gpu.device_name)
    if known is None:
        return gpu.memory_bytes, None
    return known[0], f"device total: {known[1]}"


def derived_max_model_len(spec: ModelSpec) -> int | None:
    """vLLM's ``_get_and_verify_max_len`` (0.19.0 ``vllm/config/model.py``): the config's length
    times the RoPE scaling factor, except for ``su``/``longrope``/``llama3`` (and gemma3);
    ``yarn`` scales ``original_max_position_embeddings``."""
    derived = spec.max_position_embeddings
    if derived is None:
        return None
    raw: dict[str, Any] = spec.raw_config or {}
    rope = raw.get("rope_parameters") or raw.get("rope_scaling")
    if not isinstance(rope, dict) or "gemma3" in str(spec.model_type):
        return derived
    params = rope.values() if all(isinstance(v, dict) for v in rope.values()) and rope else [rope]
    factor = 1.0
    length = float(derived)
    for rp in params:
        kind = str(rp.get("rope_type", rp.get("type", "default")))
        if kind in ("su", "longrope", "llama3"):
            continue
        factor = float(rp.get("factor", factor) or 1.0)
        if kind == "yarn" and rp.get("original_max_position_embeddings"):
            length = float(rp["original_max_position_embeddings"])
    return int(length * factor)


def max_len_refusal(spec: ModelSpec, max_model_len: int, allow_long: bool) -> str | None:
    """vLLM's refusal of a ``max_model_len`` over the derived limit (its own words), or None."""
    derived = derived_max_model_len(spec)
    if derived is None or max_model_len <= derived or allow_long:
        return None
    model_max_length = (spec.raw_config or {}).get("model_max_length")
    if model_max_length is not None and max_model_len <= int(model_max_length):
        return None
    return (
        f"ValueError: User-specified max_model_len ({max_model_len}) is greater than the derived "
        f"max_model_len (max_position_embeddings={derived} or model_max_length="
        f"{model_max_length} in model's config.json). To allow overriding this maximum, set the "
        "env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
    )


def warmup_oom(
    profile: ProfileActivation,
    *,
    free_at_start_bytes: int,
    resident_bytes: int,
    num_reqs: int,
) -> str | None:
    """The profile run's peak does not fit in the memory free at start-up: vLLM's words.

    ``resident_bytes`` is what is already held when the peak is reached (weights, non-torch).

    The sampler warm-up's out-of-memory is caught and re-raised with this text
    (0.19.0 ``gpu_model_runner.py`` ``_dummy_sampler_run``); a forward that does not fit raises
    torch's own ``OutOfMemoryError``.
    """
    if resident_bytes + profile.peak_bytes <= free_at_start_bytes:
        return None
    if resident_bytes > free_at_start_bytes:
        return (
            "torch.OutOfMemoryError: CUDA out of memory while loading the model: "
            f"{resident_bytes / GiB:.2f} GiB of weights and non-torch memory per GPU exceed the "
            f"{free_at_start_bytes / GiB:.2f} GiB free at start-up; raise --tp / --pp"
        )
    if profile.sampler_is_peak:
        return (
            "RuntimeError: CUDA out of memory occurred when warming up sampler with "
            f"{num_reqs} dummy requests. Please try lowering `max_num_seqs` or "
            "`gpu_memory_utilization` when initializing the engine."
        )
    return (
        "torch.OutOfMemoryError: CUDA out of memory during the profile run's dummy forward "
        "(weights + peak activation exceed the free device memory); lower "
        "--max-num-batched-tokens"
    )


def sampler_warmup_after_capture_oom(
    profile: ProfileActivation,
    *,
    free_at_start_bytes: int,
    held_bytes: int,
    unkept_forward_bytes: int,
    num_reqs: int,
) -> tuple[str | None, int]:
    """The second sampler warm-up, after the KV pool and the CUDA graphs are in memory.

    vLLM 0.32.0 ``v1/worker/gpu_worker.py`` ``compile_or_warm_up_model`` (after
    ``capture_model``, "on purpose", on the last pipeline stage) runs ``_dummy_run(num_tokens=
    min(max_num_seqs, max_num_batched_tokens))`` and ``_dummy_sampler_run`` again: the same
    sampler buffers as in the profile run, with the forward's output ``N x hidden`` instead of
    ``T x hidden``. By then the device holds ``held_bytes``: weights, non-torch, the KV pool and
    the CUDA-graph pool. Where vLLM does not subtract the graphs from the KV budget (before
    0.20: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``) they sit in the slack
    ``1 - gpu_memory_utilization`` leaves, and the warm-up's buffers may no longer fit (vLLM
    0.19.0 ``gpu_worker.py``: ``capture_model`` then ``_dummy_sampler_run``, the same order).
    Returns the engine's words (or None) and the margin in bytes (negative: short)."""
    need = held_bytes + max(0, profile.sampler_bytes - unkept_forward_bytes)
    margin = free_at_start_bytes - need
    if profile.sampler_bytes == 0 or margin >= 0:
        return None, margin
    return (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with "
        f"{num_reqs} dummy requests. Please try lowering `max_num_seqs` or "
        "`gpu_memory_utilization` when initializing the engine."
    ), margin
