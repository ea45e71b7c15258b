"""SGLang token pool: ``mem_fraction_static``, ``max_total_num_tokens``, cell size, page rounding.

Reference ``engines-kv-accounting.md`` §7:

* ``rest = available_after_weights - total_free * (1 - mem_fraction_static)`` (GiB floats);
  ``max_total_num_tokens = int(rest * 2**30) // cell_size``, then ``min`` with
  ``--max-total-tokens`` and floored to a multiple of ``page_size``; MIN over PP ranks.
* ``cell_size`` (bytes per token on one rank): Σ over attention layers of
  ``max(1, kv_heads // tp) * (head_dim + v_head_dim) * s``; MLA ``(kv_lora_rank + rope) * s``
  (656 B for the fp8 NSA layout), plus the DSA indexer key (132 B per top-k layer; see
  ``layouts/sglang.py`` ``sglang_dsa_cell_bytes``). Mamba layers are not in the token pool.
* ``mem_fraction_static`` default: by TP size up to v0.4.x; from v0.5.3 (release assumed for
  PR #10975) ``round((gpu_mem - reserved) / gpu_mem, 3)`` with ``gpu_mem`` in MiB and
  ``reserved = 512 + max(chunked_prefill, 2048)*1.5 + cuda_graph_max_bs*2 + tp*pp/8*1024``,
  at least 10 GiB above 60 GiB cards.
* ``max_running_requests = min(max(int(tokens / context_len * 512), 2048), 4096)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.versions import Version
from kvbudget.units import GiB

GiB_MiB = 1024


@dataclass(frozen=True, slots=True)
class SglangDefaults:
    mem_fraction_static: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    reserved_mib: float | None
    rule: str


def sglang_defaults(
    version: Version, *, gpu_memory_mib: float | None, tp: int, pp: int = 1
) -> SglangDefaults:
    """``mem_fraction_static`` / ``chunked_prefill_size`` / ``cuda_graph_max_bs`` defaults (§7.2)."""
    if version < (0, 5, 3):
        if tp >= 16:
            frac = 0.79
        elif tp >= 8:
            frac = 0.83 if version < (0, 4, 0) else 0.81
        elif tp >= 4:
            frac = 0.85
        elif tp >= 2:
            frac = 0.87
        else:
            frac = 0.88
        return SglangDefaults(frac, 8192, 160, None, f"TP-size rule (<= v0.4.x era; tp={tp})")
    if gpu_memory_mib is None:
        return SglangDefaults(0.88, 4096, 160, None, "unknown device memory: 0.88")
    gib = gpu_memory_mib / GiB_MiB
    small = tp < 4
    if gib < 20:
        chunk, bs = 2048, 8
    elif gib < 35:
        chunk, bs = 2048, 24 if small else 80
    elif gib < 60:
        chunk, bs = 4096, 32 if small else 160
    elif gib < 160:
        chunk, bs = 8192, 256 if small else 512
    else:
        chunk, bs = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + bs * 2 + tp * pp / 8 * 1024
    if gib > 60:
        reserved = max(reserved, 10 * GiB_MiB)
    frac = round((gpu_memory_mib - reserved) / gpu_memory_mib, 3)
    return SglangDefaults(
        frac,
        chunk,
        bs,
        reserved,
        f"PR #10975 heuristic: reserved {reserved:.0f} MiB of {gpu_memory_mib:.0f} MiB",
    )


@dataclass(frozen=True, slots=True)
class SglangPool:
    """The SGLang KV token pool of one replica (min over PP ranks)."""

    mem_fraction_static: float
    mem_fraction_rule: str
    cell_size_bytes: int
    rest_memory_bytes: int
    max_total_num_tokens: int
    page_size: int
    max_running_requests: int
    context_len: int
    chunked_prefill_size: int
    log_line: str
    swa_full_tokens_ratio: float | None = None
    full_tokens: int | None = None
    swa_tokens: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "mem_fraction_static": self.mem_fraction_static,
            "mem_fraction_rule": self.mem_fraction_rule,
            "cell_size_bytes": self.cell_size_bytes,
            "rest_memory_bytes": self.rest_memory_bytes,
            "max_total_num_tokens": self.max_total_num_tokens,
            "page_size": self.page_size,
            "max_running_requests": self.max_running_requests,
            "context_len": self.context_len,
            "chunked_prefill_size": self.chunked_prefill_size,
            "log_line": self.log_line,
            "swa_full_tokens_ratio": self.swa_full_tokens_ratio,
            "full_tokens": self.full_tokens,
            "swa_tokens": self.swa_tokens,
        }


def max_total_num_tokens(
    rest_memory_bytes: int,
    cell_size_bytes: int,
    *,
    page_size: int = 1,
    max_total_tokens: int | None = None,
) -> int:
    """``int(rest * 2**30) // cell``, capped by ``--max-total-tokens``, floored to the page size."""
    tokens = max(0, rest_memory_bytes) // cell_size_bytes if cell_size_bytes else 0
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    return tokens // page_size * page_size


def split_hybrid_swa(
    max_total: int, *, full_bytes: int, swa_bytes: int, num_full: int, num_swa: int, ratio: float
) -> tuple[int, int]:
    """SGLang ``set_num_tokens_hybrid_swa`` (§7.1): ``(full_tokens, swa_tokens)``.

    ``full = max_total * (F*n_full + S*n_swa) / (F*n_full + r*S*n_swa)``; ``swa = full * r``.
    """
    denominator = full_bytes * num_full + ratio * swa_bytes * num_swa
    full = int(max_total * (full_bytes * num_full + swa_bytes * num_swa) / denominator)
    return full, int(full * ratio)


def max_running_requests(tokens: int, context_len: int) -> int:
    return min(max(int(tokens / context_len * 512), 2048), 4096)


def kv_allocated_line(
    tokens: int, k_bytes_per_token: int, v_bytes_per_token: int, mla: bool
) -> str:
    """SGLang's "KV Cache is allocated" log line (sizes are bytes / 2**30, printed as GB)."""
    if mla:
        return f"KV Cache is allocated. #tokens: {tokens}, KV size: {tokens * k_bytes_per_token / GiB:.2f} GB"
    k = tokens * k_bytes_per_token / GiB
    v = tokens * v_bytes_per_token / GiB
    return f"KV Cache is allocated. #tokens: {tokens}, K size: {k:.2f} GB, V size: {v:.2f} GB"


def rest_memory_bytes(
    *, total_free_bytes: int, weights_bytes: int, other_bytes: int, mem_fraction_static: float
) -> int:
    """``available_after_weights - total_free * (1 - mem_fraction_static)`` in bytes."""
    available = total_free_bytes - weights_bytes - other_bytes
    return int(available - total_free_bytes * (1 - mem_fraction_static))
