"""SGLang's plan for Dots3-Note: the hybrid MLA-SWA pool sized by ``HybridSWAPoolConfigurator``.

The bytes per token are :mod:`kvbudget.capacity.layouts.sglang_dots3`'s (it cites the lines).
The sizing, sglang 0.5.23 (paths under ``sglang/srt/``):

* ``rest`` as every SGLang plan (``capacity.sglang_pool.rest_memory_bytes``), less the
  multimodal reservation ``mm_runtime_reservation_gb`` (``mem_cache/kv_cache_configurator.py``
  lines 202-219, subtracted at line 3038): ``SGLANG_VLM_CACHE_SIZE_MB`` 100 MiB (``environ.py``
  line 1598) for ``Dots3NoteForCausalLM``, a multimodal architecture (``configs/model_config.py``
  lines 820-828, 2457) unless the config sets ``language_model_only``; ``--kv-cache-memory``
  stands for the budget after it;
* pipeline stages split as SGLang does (``distributed/utils.py`` lines 110-150: the last stages
  take the remainder), each stage sized alone;
* ``cell = full_cell + ratio * swa_cell`` (a float; ``model_executor/pool_configurator.py``
  lines 786-803), ``max_total = int(rest // cell)`` (line 915), floored to the 64-token page;
  ``--max-total-tokens`` and the PP ranks' MIN (``kv_cache_configurator.py`` lines 3090-3117)
  re-solve it (``_solve_pool_sizes``, lines 859-893): ``full_tokens`` = max_total,
  ``swa_tokens = int(full_tokens * ratio)`` floored to the page, which must exceed
  ``sliding_window_size + page_size`` (lines 197-216);
* ``max_running_requests``: ``min(clamp(int(tokens / context_len * 512), 2048, 4096),
  tokens // 2)``, or ``min(--max-running-requests, tokens // 2)``
  (``kv_cache_configurator.py`` lines 3119-3132).
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.capacity.engines.sglang.setup import graph_reserve_inputs
from kvbudget.capacity.engines.sglang.stages import stage_memory, stage_rest
from kvbudget.capacity.layouts.sglang_dots3 import (
    DOTS3_PAGE_SIZE,
    DOTS3_SWA_FULL_TOKENS_RATIO,
    SglangDots3,
    sglang_dots3,
    sglang_pp_indices,
)
from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.memory import RankMemory
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.pool import KvCacheGroup
from kvbudget.capacity.sglang_pool import SglangDefaults, SglangPool, sglang_defaults
from kvbudget.capacity.versions import parse_version
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.model import ModelSpec
from kvbudget.units import MiB

#: the release whose Dots3-Note pools kvbudget read, and its default for this model
DOTS3_SGLANG_VERSION = "0.5.23"
#: ``SGLANG_VLM_CACHE_SIZE_MB`` (``environ.py`` line 1598), reserved out of the KV budget
VLM_CACHE_BYTES = 100 * MiB


def dots3_max_running_requests(tokens: int, context_len: int, requested: int | None) -> int:
    """``resolve_max_num_reqs`` (``kv_cache_configurator.py`` lines 3119-3132), no attention DP."""
    if requested is not None:
        return min(requested, tokens // 2)
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    return min(estimated, tokens // 2)


def make_dots3_sglang_plan(
    request: PlanRequest, model: ModelSpec, gpu: GpuSpec, weights: WeightsEstimate, context_len: int
) -> PlanResult:
    """Dots3-Note's SGLang pools for one replica (module docstring), MIN over PP ranks."""
    defaults: dict[str, str] = {}
    version_text = request.engine_version or DOTS3_SGLANG_VERSION
    if request.engine_version is None:
        defaults["engine_version"] = (
            f"{DOTS3_SGLANG_VERSION} (the SGLang release kvbudget read Dots3-Note's pools in)"
        )
    version = parse_version(version_text)
    if version < parse_version(DOTS3_SGLANG_VERSION):
        raise ConfigError(
            f"engine_version: {version_text}: kvbudget read Dots3-Note's SGLang pools in "
            f"{DOTS3_SGLANG_VERSION} only (srt/models/dots3.py, model_executor/"
            f"pool_configurator.py lines 656-922); pass --engine-version {DOTS3_SGLANG_VERSION}",
            field="engine_version",
        )
    sm100 = (gpu.compute_capability_major or 0) >= 10
    d3 = sglang_dots3(model, request.kv_dtype, tp=request.tp, sm100=sm100)
    rule = sglang_defaults(
        version,
        gpu_memory_mib=gpu.memory_bytes / MiB,
        tp=request.tp,
        pp=request.pp,
        **graph_reserve_inputs(request, model),
    )
    frac = request.mem_fraction_static or rule.mem_fraction_static
    if request.mem_fraction_static is None:
        defaults["mem_fraction_static"] = f"{frac} ({rule.rule})"
    if request.kv_dtype.strip().lower() == "auto":
        defaults["kv_dtype"] = f"{d3.dtype.name} (SGLang's DSA default on this GPU)"
    ratio = request.swa_full_tokens_ratio or DOTS3_SWA_FULL_TOKENS_RATIO
    if request.swa_full_tokens_ratio is None:
        defaults["swa_full_tokens_ratio"] = (
            f"{DOTS3_SWA_FULL_TOKENS_RATIO} (SGLang's fallback, arg_groups/fields/schedule.py "
            "lines 150-161)"
        )
    page = DOTS3_PAGE_SIZE
    notes = [
        "Dots3-Note in SGLang: SWAKVPool of a DSATokenToKVPool (full layers: latent + indexer "
        "key) and an MLA pool for the sliding layers, sized by HybridSWAPoolConfigurator",
        "free memory before weights taken as device memory minus 512 MiB CUDA context (estimate)",
    ]
    if request.page_size not in (None, page):
        notes.append(
            f"SGLang sets page_size {page} for DSA models on CUDA; --page-size "
            f"{request.page_size} is overridden"
        )
    if d3.multimodal and request.kv_cache_memory_bytes is None:
        notes.append(
            "100 MiB reserved out of the KV budget for multimodal buffers "
            "(SGLANG_VLM_CACHE_SIZE_MB; config without language_model_only)"
        )
    cells: list[tuple[int, int]] = []  # (full, swa) bytes per token of each stage
    ranks: list[RankMemory] = []
    per_rank_tokens: list[int] = []
    for p in range(request.pp):
        start, end = sglang_pp_indices(model.num_layers, p, request.pp)
        n_full, n_swa = d3.counts(start, end)
        full_cell, swa_cell = n_full * d3.full_bytes, n_swa * d3.swa_bytes
        cells.append((full_cell, swa_cell))
        other, rest = stage_rest(
            request,
            weights_bytes=weights.per_rank_bytes[p],
            mem_fraction_static=frac,
            gpu=gpu,
            reserved_bytes=VLM_CACHE_BYTES if d3.multimodal else 0,
        )
        cell = full_cell + ratio * swa_cell  # pool_configurator.py lines 798-803
        tokens = int(max(rest, 0) // cell) // page * page if cell else 0
        per_rank_tokens.append(tokens)
        ranks.append(
            stage_memory(
                request,
                gpu,
                weights,
                p,
                mem_fraction_static=frac,
                non_torch=other,
                rest=rest,
                num_layers=end - start,
                num_blocks=0,
                kv_pool_bytes=0,
            )
        )
    full_tokens = min(per_rank_tokens)  # PP: all-reduced MIN (kv_cache_configurator.py 3108-3115)
    if request.max_total_tokens is not None:
        full_tokens = min(full_tokens, request.max_total_tokens) // page * page
    swa_tokens = int(full_tokens * ratio) // page * page
    ranks = [
        _with_pool(r, full_tokens, swa_tokens, full, swa, page)
        for r, (full, swa) in zip(ranks, cells, strict=True)
    ]
    pools = (full_tokens, swa_tokens)
    return _result(
        request,
        model,
        gpu,
        weights,
        context_len,
        d3,
        ratio,
        rule,
        frac,
        ranks,
        cells,
        pools,
        defaults,
        notes,
    )


def _with_pool(
    rank: RankMemory, full_tokens: int, swa_tokens: int, full: int, swa: int, page: int
) -> RankMemory:
    return replace(
        rank, num_blocks=full_tokens // page, kv_pool_bytes=full_tokens * full + swa_tokens * swa
    )


def _error(
    d3: SglangDots3, rest: int, frac: float, full: int, swa: int, context_len: int
) -> str | None:
    """SGLang's refusal at start-up, or kvbudget's context check; ``None`` when it serves."""
    page = DOTS3_PAGE_SIZE
    if rest <= 0:
        return (
            "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static="
            f"{frac}. Raise --mem-fraction-static"
        )
    if d3.window + page >= swa:  # validate_swa_pool_size, pool_configurator.py lines 197-216
        return (
            f"SWA pool ({swa} tokens) cannot hold even one request: the prefill admission floor "
            f"is sliding_window_size ({d3.window}) + page_size ({page}). Increase "
            "--swa-full-tokens-ratio or the total KV budget."
        )
    if full < context_len:
        return (
            f"(kvbudget check, not an SGLang message) one request of context_len {context_len} "
            f"tokens needs more than the full pool's {full} tokens; lower --context-length or "
            "raise --mem-fraction-static"
        )
    return None


def _result(
    request: PlanRequest,
    model: ModelSpec,
    gpu: GpuSpec,
    weights: WeightsEstimate,
    context_len: int,
    d3: SglangDots3,
    ratio: float,
    rule: SglangDefaults,
    frac: float,
    ranks: list[RankMemory],
    cells: list[tuple[int, int]],
    pools: tuple[int, int],
    defaults: dict[str, str],
    notes: list[str],
) -> PlanResult:
    page = DOTS3_PAGE_SIZE
    full_tokens, swa_tokens = pools
    rest_min = min(r.available_kv_bytes for r in ranks)
    max_running = dots3_max_running_requests(full_tokens, context_len, request.max_num_seqs)
    if request.max_num_seqs is None:
        defaults["max_running_requests"] = (
            f"{max_running} (min(max(tokens/context_len*512, 2048), 4096), at most tokens // 2)"
        )
    error = _error(d3, rest_min, frac, full_tokens, swa_tokens, context_len)
    full_max = max(f for f, _ in cells)
    growth = max(f + s for f, s in cells)  # per token before the window fills
    line = (
        f"Use sliding window memory pool. full_layer_tokens={full_tokens}, "
        f"swa_layer_tokens={swa_tokens}"
    )  # pool_configurator.py lines 888-891
    notes.append(
        f"hybrid SWA pool (ratio {ratio}): {full_tokens} full-layer tokens, {swa_tokens} "
        "sliding-layer tokens; the full pool bounds the context"
    )
    swa_request = min(-(-context_len // page) * page, d3.swa_request_tokens(page))
    needed = -(-context_len // page) * page * full_max + swa_request * max(s for _, s in cells)
    concurrency = full_tokens / context_len
    if swa_tokens / swa_request < concurrency:  # the SWA pool admits fewer requests
        concurrency = swa_tokens / swa_request
        notes.append(
            f"the SWA pool bounds concurrency: {swa_tokens} tokens / {swa_request} per request "
            f"(at most the window {d3.window} + eviction interval + 2 pages, compute_swa_request_"
            "cap) < the full pool's; raise --swa-full-tokens-ratio"
        )
    group = KvCacheGroup(
        0,
        VllmLayerSpec(d3.full_layers[0], "mla", page, full_max * page),
        LayerIndices([range(model.num_layers)]),
    )
    sg = SglangPool(
        mem_fraction_static=frac,
        mem_fraction_rule=rule.rule,
        cell_size_bytes=full_max,
        rest_memory_bytes=rest_min,
        max_total_num_tokens=full_tokens,
        page_size=page,
        max_running_requests=max_running,
        context_len=context_len,
        chunked_prefill_size=request.max_num_batched_tokens or rule.chunked_prefill_size,
        log_line=line,
        swa_full_tokens_ratio=ratio,
        full_tokens=full_tokens,
        swa_tokens=swa_tokens,
    )
    return PlanResult(
        model_id=model.model_id,
        engine="sglang",
        engine_version=request.engine_version or DOTS3_SGLANG_VERSION,
        gpu=gpu,
        tp=request.tp,
        pp=request.pp,
        kv_dtype=d3.dtype.name,
        max_model_len=context_len,
        max_num_batched_tokens=sg.chunked_prefill_size,
        max_num_seqs=max_running,
        block_size=page,
        groups=(group,),
        group_size=len(group.layer_indices),
        num_padding_layers=0,
        page_size_bytes=group.page_size_bytes,
        num_blocks=full_tokens // page,
        num_usable_blocks=full_tokens // page,
        kv_cache_tokens=full_tokens,
        max_concurrency=concurrency,
        available_kv_bytes=rest_min,
        fits=error is None,
        needed_bytes=needed,
        estimated_max_model_len=None if error is None else max(0, full_tokens),
        error=error,
        log_lines=(line,),
        kv_bytes_per_token_per_rank=growth,
        kv_bytes_per_token_replica=sum(f + s for f, s in cells) * request.tp,
        weights=weights,
        ranks=tuple(ranks),
        sglang=sg,
        notes=tuple(notes) + weights.notes,
        headroom_fraction=request.headroom_fraction,
        defaults_applied=defaults,
    )
