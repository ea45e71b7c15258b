"""SGLang's DeepSeek-V4 pool sizes: ``DSV4PoolConfigurator.calculate_pool_sizes`` (sglang 0.5.23
``srt/model_executor/pool_configurator.py`` lines 1067-1712, chosen at 1718-1719) on the default
CUDA path the byte facts of :mod:`kvbudget.capacity.layouts.sglang_dsv4` describe.

``available`` is the rest memory after weights with ``mem_fraction_static``
(``mem_cache/kv_cache_configurator.py`` lines 2990-3050, handed to ``calculate_pool_sizes`` at
3203-3206). The configurator prices one token of the full index as ``bytes_per_full_token``
(floats, in SGLang's own order of operations, so the floor lands where SGLang's does):

* ``bytes_per_swa_token = page_bytes(P) / P * layers + ring4 / P * (c4 state + c4 indexer
  state) * csa`` (lines 1372-1388);
* ``bytes_per_full_token = swa_ratio * bytes_per_swa_token + (1/4 * page_bytes(P/4) / (P/4) +
  1/4 * indexer) * csa + 1/128 * page_bytes(P/128) / (P/128) * hca`` (lines 1390-1409,
  1437-1446; ``_get_paged_kv_bytes_per_token`` 1353-1370);
* the c128 states are fixed bytes, a ring per request slot (``max_running_requests + 1``,
  lines 1505-1527): ``ceil((slots * 128 + 128 + 1) / 128) * 128 * 2 * head_dim * 4 * hca``;
* ``full = int((available - fixed) / bytes_per_full_token) // P * P`` (lines 1668-1669), capped
  by ``--max-total-tokens`` and the PP minimum (``kv_cache_configurator.py`` lines 3090-3117,
  then re-floored to the page, lines 1463-1465); ``swa = int(full * ratio) // P * P``, which must
  exceed ``window + P`` (lines 198-219, 1457-1461); ``c4 = full // 4``, ``c128 = full // 128``,
  ``c4_state = swa // P * 8`` (lines 1488-1502).

The SWA ratio: ``deepseek_v4`` declares ``swa_full_tokens_ratio`` 0.1 when it is not given
(``arg_groups/model_overrides/deepseek_v4.py`` lines 43-49), so the cache hook records it as set
(``arg_groups/kv_cache_hook.py`` lines 415-420) and the configurator sizes by ratio, never by
request cap (lines 1049-1055, 1327-1331). ``max_running_requests`` defaults to 256
(``arg_groups/deepseek_v4_hook.py`` lines 137-146), then ``min(requested, full // 2)``
(``kv_cache_configurator.py`` lines 3119-3132).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbudget.capacity.layouts.sglang_dsv4 import (
    C4_RING,
    C128_RING,
    CSA_RATIO,
    DSV4_PAGE_SIZE,
    HCA_RATIO,
    Dsv4Stage,
    c4_state_row_bytes,
    c128_state_row_bytes,
    dsv4_stage,
    index_row_bytes,
    sglang_dsv4_dtype,
    v4_page_bytes,
)
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

#: ``swa_full_tokens_ratio`` declared for ``deepseek_v4`` (``model_overrides/deepseek_v4.py``
#: line 48; also ``DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO``, ``pool_configurator.py`` line 1046)
DSV4_SWA_RATIO = 0.1
#: ``max_running_requests`` declared for DeepSeek-V4 (``deepseek_v4_hook.py`` lines 137-146)
DSV4_MAX_RUNNING_REQUESTS = 256
#: compressor-state rings with speculative decoding (``get_compress_state_ring_size``,
#: ``deepseek_v4_memory_pool.py`` lines 76-77)
C4_SPEC_RING = 16
C128_SPEC_RING = 256


@dataclass(slots=True)
class Dsv4Setup:
    """What the planner needs before sizing: the kv dtype name, the SWA ratio and the requested
    running requests (their c128 state rings are fixed bytes)."""

    kv_dtype: str
    swa_ratio: float
    max_running_requests: int
    default_running: bool  # no --max-num-seqs: SGLang's DeepSeek-V4 default
    page_size: int = DSV4_PAGE_SIZE
    #: ``speculative_num_draft_tokens`` of a NextN (EAGLE) drafter, 0 without one (dsv4_spec.py)
    draft_tokens: int = 0

    @property
    def c4_ring(self) -> int:
        """``get_compress_state_ring_size(4, draft_tokens)``: 16 rows with a drafter, else 8
        (``deepseek_v4_memory_pool.py`` lines 60-80)."""
        return C4_SPEC_RING if self.draft_tokens else C4_RING

    @property
    def c128_ring(self) -> int:
        """``get_compress_state_ring_size(128, draft_tokens)``: 256 rows with a drafter, else 128."""
        return C128_SPEC_RING if self.draft_tokens else C128_RING


def dsv4_setup(request: PlanRequest, notes: list[str], defaults: dict[str, str]) -> Dsv4Setup:
    """SGLang's DeepSeek-V4 settings for ``request`` (refuses a kv dtype SGLang refuses); adds
    its notes and the defaults it applied to ``notes`` and ``defaults``."""
    name = sglang_dsv4_dtype(request.kv_dtype)
    setup = Dsv4Setup(
        name,
        request.swa_full_tokens_ratio or DSV4_SWA_RATIO,
        request.max_num_seqs or DSV4_MAX_RUNNING_REQUESTS,
        request.max_num_seqs is None,
    )
    if request.kv_dtype.strip().lower() == "auto":
        defaults["kv_dtype"] = "fp8_e4m3 (SGLang's DeepSeek-V4 default)"
    if request.swa_full_tokens_ratio is None:
        defaults["swa_full_tokens_ratio"] = f"{DSV4_SWA_RATIO} (SGLang's DeepSeek-V4 default)"
    if request.page_size not in (None, DSV4_PAGE_SIZE):
        notes.append(
            f"SGLang sets page_size {DSV4_PAGE_SIZE} for DeepSeek-V4 on CUDA "
            f"(model_overrides/deepseek_v4.py lines 51-61); --page-size {request.page_size} is "
            "overridden"
        )
    notes.append(
        "SGLang DeepSeek-V4 pools (DSV4PoolConfigurator): the full index is priced at "
        "bytes_per_full_token (SWA share by swa_full_tokens_ratio, c4 rows + indexer keys, c128 "
        "rows); the c128 compressor-state rings of max_running_requests + 1 slots are fixed "
        "bytes taken first; the default CUDA path (flashmla backend, v4 KV layout; a drafter as "
        "its speculative_config note says), as read in sglang 0.5.23 whatever --engine-version "
        "says"
    )
    return setup


def max_running(setup: Dsv4Setup, full_tokens: int, defaults: dict[str, str]) -> int:
    """``resolve_max_num_reqs`` with the requested count (``kv_cache_configurator.py`` lines
    3126-3129): ``min(requested, full_tokens // 2)``."""
    running = min(setup.max_running_requests, full_tokens // 2)
    if setup.default_running:
        defaults["max_running_requests"] = (
            f"{running} (SGLang's DeepSeek-V4 default {DSV4_MAX_RUNNING_REQUESTS}, at most "
            "max_total_num_tokens // 2)"
        )
    return running


def bytes_per_swa_token(stage: Dsv4Stage, page_size: int, c4_ring: int = C4_RING) -> float:
    """``_get_bytes_per_swa_token`` (lines 1372-1388), in SGLang's float arithmetic."""
    c4_state_ratio = c4_ring / page_size
    paged = v4_page_bytes(page_size) / page_size
    return paged * len(stage.layers) + (c4_state_ratio * c4_state_row_bytes(stage) * len(stage.csa))


def bytes_per_full_token(
    stage: Dsv4Stage, page_size: int, swa_ratio: float, draft_tokens: int = 0
) -> float:
    """``_get_bytes_per_full_token`` (lines 1437-1446) with ratio sizing; with a drafter its
    c4 ring of 16 and the ``(layers + 1) / layers`` inflation (lines 1250-1257)."""
    c4_ring = C4_SPEC_RING if draft_tokens else C4_RING
    total = swa_ratio * bytes_per_swa_token(stage, page_size, c4_ring)
    if stage.csa:  # ratio 4 first: ``collect_sources_by_ratio`` walks (4, 128, 1, 2)
        rows = page_size // CSA_RATIO
        c4 = 1 / (4 * 1) * (v4_page_bytes(rows) / rows) + 1 / 4 * index_row_bytes(
            stage.index_head_dim
        )
        total += c4 * len(stage.csa)
    if stage.hca:
        rows = page_size // HCA_RATIO
        total += 1 / 128 * (v4_page_bytes(rows) / rows) * len(stage.hca)
    if draft_tokens:  # ``_spec_infl``: one draft layer whatever the drafter has
        total *= (len(stage.layers) + 1) / len(stage.layers)
    return total


def c128_state_fixed_bytes(
    stage: Dsv4Stage, max_running_requests: int, ring: int = C128_RING
) -> int:
    """``_get_c128_state_fixed_bytes`` (lines 1509-1530): a ``ring``-row ring per request slot
    (128 rows, 256 with a drafter)."""
    if not stage.hca:
        return 0
    slots = max_running_requests + 1  # ``_get_num_req_slots`` (lines 1504-1507)
    rows = cdiv(slots * ring + ring + 1, 128) * 128
    return rows * c128_state_row_bytes(stage) * len(stage.hca)


@dataclass(frozen=True, slots=True)
class Dsv4Pool:
    """One stage's pool sizes (SGLang's "DSV4 pool sizes" log line, ``_to_config``)."""

    full_tokens: int
    swa_tokens: int
    bytes_per_full_token: float
    fixed_bytes: int
    page_size: int
    window: int
    ratio: float
    c4_ring: int = C4_RING

    @property
    def c4_tokens(self) -> int:
        return self.full_tokens // CSA_RATIO

    @property
    def c128_tokens(self) -> int:
        return self.full_tokens // HCA_RATIO

    @property
    def c4_state_pool_size(self) -> int:
        return self.swa_tokens // self.page_size * self.c4_ring

    @property
    def pool_bytes(self) -> int:
        """What the configurator budgets: the full index at ``bytes_per_full_token`` plus the
        fixed c128 state rings."""
        return int(self.full_tokens * self.bytes_per_full_token) + self.fixed_bytes

    @property
    def draft_pool_bytes(self) -> int:
        """The NextN drafter's own pool: one ratio-0 layer's SWA pages for ``swa_tokens``,
        ``swa // page + 1`` of them (``_num_dsv4_physical_kv_pages``,
        ``deepseek_v4_memory_pool.py`` lines 165-169, 279-291); no compressed or state pools."""
        return (self.swa_tokens // self.page_size + 1) * v4_page_bytes(self.page_size)

    def error(self) -> str | None:
        """SGLang's ``validate_swa_pool_size`` (lines 198-219) refusal, or None."""
        if self.window + self.page_size < self.swa_tokens:
            return None
        return (
            f"SWA pool ({self.swa_tokens} tokens) cannot hold even one request: the prefill "
            f"admission floor is sliding_window_size ({self.window}) + page_size "
            f"({self.page_size}). Increase --swa-full-tokens-ratio or the total KV budget."
        )

    def log_line(self) -> str:
        """SGLang's ``DSV4 pool sizes`` log line (``_to_config``, lines 1602-1611); c128_state
        is 0 there, sized later from max_running_requests (lines 1622-1636)."""
        return (
            f"DSV4 pool sizes: full={self.full_tokens}, swa={self.swa_tokens}, "
            f"c4={self.c4_tokens}, c128={self.c128_tokens}, "
            f"c4_state={self.c4_state_pool_size}, c128_state=0"
        )


def dsv4_full_tokens(stage: Dsv4Stage, available_bytes: int, setup: Dsv4Setup) -> int:
    """``calculate_pool_sizes`` (lines 1638-1669): the full index's token count of one stage."""
    page = setup.page_size
    fixed = c128_state_fixed_bytes(stage, setup.max_running_requests, setup.c128_ring)
    left = max(available_bytes - fixed, 0)
    full = int(left / bytes_per_full_token(stage, page, setup.swa_ratio, setup.draft_tokens))
    return max(full // page * page, 0)


def dsv4_pool(stage: Dsv4Stage, full_tokens: int, setup: Dsv4Setup) -> Dsv4Pool:
    """``_compute_dsv4_sizes`` (lines 1463-1502) for an already constrained token count."""
    page = setup.page_size
    full = full_tokens // page * page
    swa = int(full * setup.swa_ratio) // page * page
    return Dsv4Pool(
        full,
        swa,
        bytes_per_full_token(stage, page, setup.swa_ratio, setup.draft_tokens),
        c128_state_fixed_bytes(stage, setup.max_running_requests, setup.c128_ring),
        page,
        stage.window,
        setup.swa_ratio,
        setup.c4_ring,
    )


def rank_cell_bytes(model: ModelSpec, start: int, end: int, setup: Dsv4Setup) -> int:
    """``bytes_per_full_token`` of the stage, rounded up to a whole byte (for reporting)."""
    return math.ceil(
        bytes_per_full_token(
            dsv4_stage(model, start, end), setup.page_size, setup.swa_ratio, setup.draft_tokens
        )
    )


def rank_tokens(
    model: ModelSpec, start: int, end: int, available_bytes: int, setup: Dsv4Setup, cap: int | None
) -> int:
    """The stage's ``max_total_num_tokens``: :func:`dsv4_full_tokens`, then ``--max-total-tokens``
    (``kv_cache_configurator.py`` lines 3096-3105) re-floored to the page (line 1464)."""
    tokens = dsv4_full_tokens(dsv4_stage(model, start, end), available_bytes, setup)
    if cap is not None:
        tokens = min(tokens, cap) // setup.page_size * setup.page_size
    return tokens


def rank_fixed_bytes(model: ModelSpec, start: int, end: int, setup: Dsv4Setup) -> int:
    """The stage's c128 state rings (fixed bytes beside the token-priced pools)."""
    return c128_state_fixed_bytes(
        dsv4_stage(model, start, end), setup.max_running_requests, setup.c128_ring
    )


def rank_pool(model: ModelSpec, start: int, end: int, tokens: int, setup: Dsv4Setup) -> Dsv4Pool:
    """The stage's pool sizes for the replica's token count (the PP minimum)."""
    return dsv4_pool(dsv4_stage(model, start, end), tokens, setup)
