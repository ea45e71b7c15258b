"""SGLang token pool: ``mem_fraction_static``, ``max_total_num_tokens``, cell size, page rounding.

Reference ``engines-kv-accounting.md`` §7:

* ``rest = available_after_weights - total_free * (1 - mem_fraction_static)`` (GiB floats);
  ``max_total_num_tokens = int(rest * 2**30) // cell_size``, then ``min`` with
  ``--max-total-tokens`` and floored to a multiple of ``page_size``; MIN over PP ranks.
* ``cell_size`` (bytes per token on one rank): Σ over attention layers of
  ``max(1, kv_heads // tp) * (head_dim + v_head_dim) * s``; MLA ``(kv_lora_rank + rope) * s``
  (656 B for the fp8 NSA layout), plus the DSA indexer key (132 B per top-k layer; see
  ``layouts/sglang.py`` ``sglang_dsa_cell_bytes``). Mamba layers are not in the token pool.
* Hybrid mamba / linear-attention models: before the token pool, SGLang 0.5.23 carves a
  per-request state pool out of ``rest`` (``mem_cache/kv_cache_configurator.py``
  ``_handle_max_mamba_cache``, lines 3229-3396, called at line 3040): budget
  ``rest * r / (1 + r)`` with ``r = mamba_full_memory_ratio`` (lines 3352-3356; default 0.9,
  ``arg_groups/fields/schedule.py`` lines 220-227), ``max_mamba_cache_size =
  int((budget - per_req) // per_req)`` (lines 3379-3386), and the token pool gets
  ``rest - (max_mamba_cache_size + 1) * per_req`` (the +1 padding slot, lines 3404-3409). See
  :func:`mamba_state_pool`; 0.5.4 has no padding slot and gives the pool to Falcon-H1,
  Nemotron-H and Qwen3-Next only (``model_executor/model_runner.py`` lines 1433-1498).
* ``mem_fraction_static`` default: by TP size up to v0.4.x; from v0.5.3 (release assumed for
  PR #10975) ``round((gpu_mem - reserved) / gpu_mem, 3)`` with ``gpu_mem`` in MiB and
  ``reserved = 512 + max(chunked_prefill, 2048)*1.5 + cuda_graph_max_bs*2 + tp*pp/8*1024``,
  at least 10 GiB above 60 GiB cards. From 0.5.23 (:data:`GRAPH_RESERVE_VERSION`) the prefill
  CUDA graph is reserved too (``len(sizes) * 8`` MiB, MLA 1.5 GiB) before the floor.
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


#: from this version (the 0.5.23 wheel kvbudget read; 0.5.4's ``server_args.py``
#: ``_handle_gpu_memory_settings`` lines 643-800 is the rule below it) the default
#: ``mem_fraction_static`` also reserves the prefill CUDA graph (on by default on CUDA), has new
#: 20-35 GiB tier defaults, caps the decode graph at ``--max-running-requests``, reads a given
#: ``--chunked-prefill-size`` and falls back to 0.95: :func:`_defaults_0523`. Between 0.5.4 and
#: 0.5.23 the release it changed in is not known: assumed 0.5.23.
GRAPH_RESERVE_VERSION = (0, 5, 23)


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """0.5.23 ``generate_prefill_cuda_graph_batch_sizes`` (``arg_groups/cuda_graph_hook.py``
    lines 480-497): the captured prefill token counts up to ``max_bs``."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1024 + 1, 64),
        *range(1280, 4096 + 1, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return [x for x in sizes if x <= max_bs]


def _defaults_0523(
    gpu_memory_mib: float | None,
    tp: int,
    pp: int,
    *,
    mla: bool,
    prefill_graph: bool,
    max_running_requests: int | None,
    chunked_prefill_size: int | None,
    max_total_tokens: int | None,
) -> SglangDefaults:
    """0.5.23 ``arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` (lines 47-355) without
    post-capture KV sizing (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING`` off by default,
    ``environ.py`` line 640), DP attention, DeepEP, PD disaggregation or the VLM adjustment."""
    if gpu_memory_mib is None:  # lines 171-179, 324-328
        return SglangDefaults(
            0.95, chunked_prefill_size or 4096, 160, None, "unknown device memory: 0.95"
        )
    gib = gpu_memory_mib / GiB_MiB
    small = tp < 4
    if gib < 20:  # lines 90-100
        chunk, bs = 2048, 8
    elif gib < 35:  # lines 101-117
        chunk, bs = 4096, 48 if small else 160
    elif gib < 60:  # lines 118-131
        chunk, bs = 4096, 32 if small else 160
    elif gib < 160:  # lines 132-159
        chunk, bs = 8192, 256 if small else 512
    else:  # lines 160-170
        chunk, bs = 16384, 512
    if max_running_requests is not None and bs > max_running_requests:  # lines 182-188
        bs = max_running_requests
    chunk = chunked_prefill_size or chunk
    graph = bs * 2.0  # reserve_for_graph_mb, lines 364-368: the decode graph
    prefill = "off (pipeline parallel, cuda_graph_hook.py lines 150-161)" if pp > 1 else "off"
    if prefill_graph and pp == 1:  # lines 380-389: breakable prefill graph, CUDA default
        if mla:
            graph += 1.5 * GiB_MiB
            prefill = "MLA 1536 MiB"
        else:  # lines 233-256: max_bs = chunk, at most --max-total-tokens
            max_bs = chunk if max_total_tokens is None else min(chunk, max_total_tokens)
            n = len(prefill_graph_sizes(max_bs))
            graph += n * 8
            prefill = f"{n} sizes x 8 MiB"
    reserved = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8 * 1024 + graph  # lines 296-313
    if gib > 60:  # lines 314-315
        reserved = max(reserved, 10 * GiB_MiB)
    frac = round((gpu_memory_mib - reserved) / gpu_memory_mib, 3)
    return SglangDefaults(
        frac,
        chunk,
        bs,
        reserved,
        f"0.5.23 heuristic: reserved {reserved:.0f} MiB of {gpu_memory_mib:.0f} MiB "
        f"(prefill graph {prefill})",
    )


def sglang_defaults(
    version: Version,
    *,
    gpu_memory_mib: float | None,
    tp: int,
    pp: int = 1,
    mla: bool = False,
    prefill_graph: bool = True,
    max_running_requests: int | None = None,
    chunked_prefill_size: int | None = None,
    max_total_tokens: int | None = None,
) -> SglangDefaults:
    """``mem_fraction_static`` / ``chunked_prefill_size`` / ``cuda_graph_max_bs`` defaults (§7.2).

    The keywords after ``pp`` are read from :data:`GRAPH_RESERVE_VERSION` on: ``mla`` (SGLang's
    ``use_mla_backend``), ``prefill_graph`` (False where SGLang turns the prefill graph off for
    the model, e.g. DeepSeek-V4), and the flags given."""
    if version >= GRAPH_RESERVE_VERSION:
        return _defaults_0523(
            gpu_memory_mib,
            tp,
            pp,
            mla=mla,
            prefill_graph=prefill_graph,
            max_running_requests=max_running_requests,
            chunked_prefill_size=chunked_prefill_size,
            max_total_tokens=max_total_tokens,
        )
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
    #: hybrid mamba models: the per-request state pool carved out of the rest first
    mamba_full_memory_ratio: float | None = None
    mamba_state_bytes_per_request: int | None = None
    max_mamba_cache_size: int | None = None
    mamba_pool_bytes: int | None = None

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
            "mamba_full_memory_ratio": self.mamba_full_memory_ratio,
            "mamba_state_bytes_per_request": self.mamba_state_bytes_per_request,
            "max_mamba_cache_size": self.max_mamba_cache_size,
            "mamba_pool_bytes": self.mamba_pool_bytes,
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
    """SGLang 0.5.4's hybrid SWA split (§7.1): ``(full_tokens, swa_tokens)``.

    ``full = max_total * (F*n_full + S*n_swa) / (F*n_full + r*S*n_swa)``; ``swa = full * r``
    (0.5.4 ``model_executor/model_runner.py`` ``set_num_token_hybrid`` lines 1557-1575, with
    ``F = S``: ``full = int(max_total * n_layers / (r*n_swa + n_full))``). From
    :data:`HYBRID_SWA_CONFIGURATOR_VERSION` see :func:`hybrid_swa_max_total_tokens`.
    """
    denominator = full_bytes * num_full + ratio * swa_bytes * num_swa
    full = int(max_total * (full_bytes * num_full + swa_bytes * num_swa) / denominator)
    return full, int(full * ratio)


#: from this version (the 0.5.23 wheel kvbudget read; 0.5.4 splits after sizing, above) SGLang
#: sizes a hybrid SWA pool with ``HybridSWAPoolConfigurator`` (0.5.23
#: ``model_executor/pool_configurator.py`` lines 656-921, chosen for every ``is_hybrid_swa``
#: model but DeepSeek-V4 at lines 1715-1725): :func:`hybrid_swa_max_total_tokens` then
#: :func:`hybrid_swa_pools`
HYBRID_SWA_CONFIGURATOR_VERSION = (0, 5, 23)


def hybrid_swa_max_total_tokens(
    rest_bytes: int, full_bytes: int, swa_bytes: int, ratio: float
) -> int:
    """0.5.23 ``HybridSWAPoolConfigurator.calculate_pool_sizes`` before alignment
    (``pool_configurator.py`` lines 786-803, 907-916): ``int(rest // (F + r x S))`` full tokens,
    ``F`` / ``S`` the bytes per token of the rank's full / sliding layers (all-sliding, ``F = 0``:
    ``rest // S`` sliding tokens, ratio not applied, lines 789-796)."""
    cell = full_bytes + ratio * swa_bytes if full_bytes else swa_bytes
    return int(max(0, rest_bytes) // cell) if cell else 0


def hybrid_swa_pools(
    max_total: int, ratio: float, page_size: int, *, all_swa: bool
) -> tuple[int, int]:
    """0.5.23 ``_solve_pool_sizes`` (``pool_configurator.py`` lines 859-893) on the constrained
    ``max_total`` (``--max-total-tokens`` and the PP minimum, ``kv_cache_configurator.py``
    lines 3090-3117, 3212-3227): ``(full, sliding)`` tokens, each floored to the page size."""
    if all_swa:
        return 0, max_total // page_size * page_size
    full = max_total // page_size * page_size
    return full, int(full * ratio) // page_size * page_size


#: SGLang ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` (``kv_cache_configurator.py`` line 227):
#: state slots per running request with the radix cache on and no extra buffer
MAMBA_SLOTS_PER_REQUEST = 3
#: ``--mamba-full-memory-ratio`` fallback (``arg_groups/fields/schedule.py`` lines 220-227)
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9


#: the first release read with the padding slot (sglang 0.5.23 wheel); 0.5.4's
#: ``ModelRunner.handle_max_mamba_cache`` (``model_executor/model_runner.py`` lines 1433-1480) has
#: none: ``size = int(budget * 2**30 // per_req)``, state ``size * per_req``
MAMBA_PADDING_SLOT_VERSION = (0, 5, 23)


def mamba_state_pool(
    rest_bytes: int,
    per_request_bytes: int,
    ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO,
    *,
    padding_slot: bool = True,
) -> tuple[int, int, int]:
    """SGLang's mamba state pool without speculative decoding: ``(max_mamba_cache_size, state
    pool bytes, rest bytes left for the token pool)``.

    ``budget = rest * r / (1 + r)`` (GiB floats, as SGLang keeps ``rest``). With
    ``padding_slot`` (0.5.23 ``_handle_max_mamba_cache``): ``size = int((budget - per_req) //
    per_req)`` and the pool holds ``size + 1`` slots; without (0.5.4): ``size = int(budget //
    per_req)`` slots. The token pool gets ``rest - pool``, converted back with ``int(x * 2**30)``.
    """
    rest_gib = rest_bytes / GiB
    budget_bytes = rest_gib * ratio / (1 + ratio) * GiB
    if padding_slot:
        size = int((budget_bytes - per_request_bytes) // per_request_bytes)
        slots = size + 1
    else:
        size = int(budget_bytes // per_request_bytes)
        slots = size
    left_gib = rest_gib - slots * per_request_bytes / GiB
    return size, max(slots, 0) * per_request_bytes, int(left_gib * GiB)


def max_running_requests(tokens: int, context_len: int) -> int:
    return min(max(int(tokens / context_len * 512), 2048), 4096)


#: from this version SGLang caps ``max_running_requests``, given or estimated, at half the token
#: pool (0.5.23 ``mem_cache/kv_cache_configurator.py`` ``resolve_max_num_reqs`` lines 3126-3132:
#: ``min(requested, token_capacity // 2)`` / ``min(estimated, token_capacity // 2)``); 0.5.4 has
#: no such cap (``model_executor/model_runner.py`` lines 1646-1670)
HALF_POOL_CAP_VERSION = (0, 5, 23)


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
