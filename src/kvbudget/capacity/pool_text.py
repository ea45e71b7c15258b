"""The texts vLLM prints about its KV pool, per version: start-up log lines and the fit error (§2.4, §2.5)."""

from __future__ import annotations

from kvbudget.capacity.versions import VllmBehaviour
from kvbudget.units import GiB

DOCS_LINK = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"


def format_gib_new(num_bytes: int | float) -> str:
    """vLLM ``format_gib``: ``round(b / 2**30, 2)`` printed as Python prints a float."""
    return str(round(num_bytes / GiB, 2))


def fit_error_text(
    behaviour: VllmBehaviour,
    *,
    available_bytes: int,
    needed: int,
    max_model_len: int,
    estimated_len: int,
    kv_tokens: int = 0,
) -> str:
    """The engine's ValueError text for the fit check (§2.5), for this version."""
    link = f" See {DOCS_LINK} for more details." if behaviour.error_style == "new" else ""
    if behaviour.token_line == "v0":
        return (
            f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens "
            f"that can be stored in KV cache ({kv_tokens}). Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )
    if available_bytes <= 0:
        return (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            f"when initializing the engine.{link}"
        )
    if behaviour.error_style == "new":
        need_txt, avail_txt = format_gib_new(needed), format_gib_new(available_bytes)
    else:
        need_txt, avail_txt = f"{needed / GiB:.2f}", f"{available_bytes / GiB:.2f}"
    estimated_msg = ""
    if estimated_len > 0:
        estimated_msg = f"Based on the available memory, the estimated maximum model length is {estimated_len}. "
    return (
        f"To serve at least one request with the models's max seq len ({max_model_len}), "
        f"({need_txt} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({avail_txt} GiB). {estimated_msg}Try increasing `gpu_memory_utilization` or decreasing "
        f"`max_model_len` when initializing the engine.{link}"
    )


def log_lines(
    behaviour: VllmBehaviour,
    *,
    available_bytes: int,
    num_blocks: int,
    tokens: int,
    concurrency: float,
    max_model_len: int,
) -> tuple[str, ...]:
    """The capacity lines the engine prints at start-up, for this version."""
    length = f"{max_model_len:,}" if behaviour.commas_in_len else str(max_model_len)
    conc = f"Maximum concurrency for {length} tokens per request: {concurrency:.2f}x"
    if behaviour.token_line == "v0":
        return (f"# GPU blocks: {num_blocks}, # CPU blocks: (swap space, not modelled)", conc)
    avail = f"Available KV cache memory: {available_bytes / GiB:.2f} GiB"
    if behaviour.token_line == "gpu_blocks":
        return (avail, f"# GPU blocks: {num_blocks}", conc)
    return (avail, f"GPU KV cache size: {tokens:,} tokens", conc)
