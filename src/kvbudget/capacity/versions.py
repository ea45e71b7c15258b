"""Engine versions: parsing and the version-dependent behaviours the pool arithmetic needs.

Each cut-off cites the reference (``engines-kv-accounting.md``). Where the reference gives an
era but not a release, the cut-off is marked *assumed* and the plan says so in its notes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvbudget.errors import ConfigError

Version = tuple[int, int, int]

#: the newest vLLM whose pool facts kvbudget has read (the vllm-0.33.0 wheel from PyPI: planning
#: moved to ``v1/core/kv_cache_planning.py``, same arithmetic as 0.32.0 with the default builder;
#: 0.32.0, the CPU build, is the newest checked against a running engine)
NEWEST_MODELLED_VLLM: Version = (0, 33, 0)
#: default versions when the user does not say: vLLM's is the newest it models (issue 29: users
#: run 0.3x)
DEFAULT_VLLM_VERSION = ".".join(str(part) for part in NEWEST_MODELLED_VLLM)
DEFAULT_SGLANG_VERSION = "0.5.4"

_VERSION_RE = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[.+\-].*)?\s*$")


def parse_version(text: str, *, field: str = "engine_version") -> Version:
    """``"0.11.0"``, ``"v0.9"``, ``"0.10.1.1"``, ``"0.21.0rc1"`` -> ``(0, 11, 0)`` etc."""
    match = _VERSION_RE.match(text)
    if not match:
        raise ConfigError(
            f"{field}: cannot read {text!r} as a version; write it like 0.11.0", field=field
        )
    major, minor, patch = (int(g) if g else 0 for g in match.groups())
    return (major, minor, patch)


@dataclass(frozen=True, slots=True)
class VllmBehaviour:
    """What a vLLM version does at each step of the pool arithmetic."""

    version: Version
    #: "v0" (no token line, "# GPU blocks"), "gpu_blocks" (v0.7.0-0.7.2), "blocks_x_block_size"
    #: (v0.7.3-~0.9), "blocks_per_group" (~0.10-0.19), "concurrency_x_len" (>= 0.20)
    token_line: str
    #: "tokens_over_len" (v0.7.x and V0: num_blocks*B/L), "cdiv_sum" (~0.9+), "sum_cdiv" (PR #48317)
    concurrency: str
    #: True from v0.20.0: CUDA-graph memory is subtracted from the KV budget (the 0.20.0, 0.20.2
    #: and 0.21.0 wheels default ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` to 1, 0.19.0 to 0;
    #: vLLM's own log line says "default since v0.21.0")
    subtracts_cudagraphs: bool
    #: True: strided group split and the 1.5x balance rule (newest); False: contiguous and min
    strided_groups: bool
    #: error text era: "v09" (``:.2f``, no link) or "new" (round(.,2) and the docs link)
    error_style: str
    #: commas in "Maximum concurrency for 32,768 tokens" (v0.7.x printed none)
    commas_in_len: bool
    default_gpu_memory_utilization: float
    notes: tuple[str, ...]


def vllm_behaviour(version_text: str) -> VllmBehaviour:
    """Behaviour table for a vLLM version (reference §2.1-§2.5, §3.2, §3.4)."""
    v = parse_version(version_text)
    notes: list[str] = []
    if v < (0, 7, 0):
        token_line = "v0"
    elif v < (0, 7, 3):
        token_line = "gpu_blocks"
    elif v < (0, 10, 0):
        token_line = "blocks_x_block_size"
        if v >= (0, 9, 0):
            notes.append(
                "token-line formula for v0.9.x assumed as num_blocks*block_size (era ~v0.9/0.10)"
            )
    elif v < (0, 20, 0):
        token_line = "blocks_per_group"
    else:
        token_line = "concurrency_x_len"
    if v < (0, 9, 0):
        concurrency = "tokens_over_len"
        if v >= (0, 8, 0):
            notes.append("concurrency for v0.8.x assumed as num_blocks*block_size/max_model_len")
    elif v < (0, 26, 0):
        concurrency = "cdiv_sum"
    else:
        concurrency = "sum_cdiv"
        notes.append(
            "concurrency as num_blocks / sum_g cdiv(max_mem_g, page) (PR #48317, merged 2026-07; "
            "release assumed v0.26)"
        )
    if v >= (0, 33, 0):
        notes.append(
            "vLLM 0.33 plans the pool in v1/core/kv_cache_planning.py (get_kv_cache_configs) "
            "through a KVCacheConfigBuilder: the default one (modelled, same arithmetic as "
            "0.32.0) unless the platform's get_kv_cache_config_builder_cls or a model's "
            "SupportsKVCacheGrouping replaces the grouping (not modelled)"
        )
    if v[:2] > NEWEST_MODELLED_VLLM[:2]:
        notes.append(
            f"vLLM {format_version(v)} is newer than the newest version kvbudget models "
            f"({format_version(NEWEST_MODELLED_VLLM)}): that version's rules are applied"
        )
    strided = v >= (0, 11, 0)
    if (0, 10, 0) <= v < (0, 12, 0):
        notes.append("hybrid group split style (strided, 1.5x rule) assumed from v0.11.0")
    return VllmBehaviour(
        version=v,
        token_line=token_line,
        concurrency=concurrency,
        subtracts_cudagraphs=v >= (0, 20, 0),
        strided_groups=strided,
        error_style="v09" if v < (0, 10, 0) else "new",
        commas_in_len=v >= (0, 8, 0),
        default_gpu_memory_utilization=0.9,
        notes=tuple(notes),
    )


#: first vLLM release whose ``--kv-cache-dtype`` accepts each name (reference §4): v0.9.2 takes
#: ``auto, fp8, fp8_e4m3, fp8_e5m2``; v0.11-0.16 add ``bfloat16`` and ``fp8_ds_mla``; the rest are
#: in the newest list only, so no release up to v0.16 takes them (0.17 is the earliest possible).
VLLM_KV_DTYPE_SINCE: dict[str, Version] = {
    "auto": (0, 0, 0),
    "fp8": (0, 0, 0),
    "fp8_e4m3": (0, 0, 0),
    "fp8_e5m2": (0, 0, 0),
    "bfloat16": (0, 11, 0),
    "fp8_ds_mla": (0, 11, 0),
    "float16": (0, 17, 0),
    "int8_per_token_head": (0, 17, 0),
    "fp8_per_token_head": (0, 17, 0),
    "nvfp4": (0, 17, 0),
}


#: vLLM resolves ``--kv-cache-dtype auto`` from a ModelOpt checkpoint's KV quantization
#: (``EngineArgs.create_engine_config``: ``resolve_kv_cache_dtype_string`` before ``CacheConfig``,
#: ``engine/arg_utils.py`` line 1398 in 0.14.0, 2256 in 0.32.0; PR #30785): absent from the
#: 0.13.0 wheel (``cache_dtype=self.kv_cache_dtype``, line 1364: ``auto`` is the model dtype),
#: present in the 0.14.0 wheel's and since (0.15-0.20, 0.24, 0.28, 0.32 read)
VLLM_KV_FROM_CHECKPOINT_SINCE: Version = (0, 14, 0)
#: ... and maps ``nvfp4`` (a string, or a 4-bit float ``kv_cache_scheme``) to the ``nvfp4`` cache:
#: ``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP`` (``utils/torch_utils.py``) holds only ``fp8`` up to
#: the 0.19.0 wheel, ``fp8`` and ``nvfp4`` from 0.20.0 (0.19.1 not read); before, vLLM warns
#: "Unknown kv_cache_quant_algo" and keeps ``auto``
VLLM_NVFP4_KV_FROM_CHECKPOINT_SINCE: Version = (0, 20, 0)
#: SGLang resolves ``--kv-cache-dtype auto`` to fp8_e4m3 when the model's quant config has
#: ``kv_cache_quant_algo`` FP8 (0.5.4 ``model_executor/model_runner.py`` lines 1610-1622; 0.5.23
#: ``mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype``); read in those two releases only
SGLANG_KV_FROM_CHECKPOINT_READ: tuple[Version, ...] = ((0, 5, 4), (0, 5, 23))
#: SGLang 0.5.23's ModelOpt FP8 config also reads a flat ``kv_cache_quant_algo`` when there is no
#: ``kv_cache_scheme`` dict (``layers/quantization/modelopt_quant.py`` lines 478-490); 0.5.4's
#: reads only ``kv_cache_scheme`` in the flat form (lines 186-197). Cut-off *assumed* at 0.5.23
SGLANG_FLAT_KV_ALGO_SINCE: Version = (0, 5, 23)
#: SGLang's compressed-tensors and ``Fp8Config`` quant configs answer ``kv_cache_quant_algo`` too:
#: 0.5.23 ``CompressedTensorsConfig.kv_cache_quant_algo`` is ``"FP8"`` for a static symmetric
#: per-tensor 8-bit float ``kv_cache_scheme`` (``layers/quantization/compressed_tensors/
#: compressed_tensors.py`` lines 142-151, 1275-1285) and ``Fp8Config.from_config`` reads the
#: config's ``kv_cache_quant_algo`` (``layers/quantization/fp8.py`` lines 366-368, 384-386);
#: 0.5.4's two classes have no such attribute (``getattr(..., None)``: ``auto`` is the model
#: dtype). Read in 0.5.4 and 0.5.23 only; the cut-off between them is *assumed* at 0.5.23
SGLANG_QUANT_CONFIG_KV_SINCE: Version = (0, 5, 23)


#: vLLM's ``--async-scheduling`` default: off up to 0.13.0 (``SchedulerConfig.async_scheduling:
#: bool = False``, ``config/scheduler.py``), on from 0.14.0 (``Field(default=None)``, which
#: ``VllmConfig.__post_init__`` turns on unless pipeline parallelism or an incompatible option
#: rules it out, ``config/vllm.py``); read in the 0.13.0, 0.14.0 and 0.32.0 sources
VLLM_ASYNC_SCHEDULING_DEFAULT_SINCE: Version = (0, 14, 0)
#: async scheduling with pipeline parallel: 0.13.0 and 0.14.0 refuse ``--async-scheduling`` with
#: ``pipeline_parallel_size > 1`` ("Async scheduling is not yet compatible with
#: pipeline_parallel_size > 1.", ``config/vllm.py``) and leave the default off; 0.32.0 refuses
#: it only on the V1 model runner (``_get_v1_model_runner_unsupported_features``) and on a GPU
#: runs the V2 model runner (``use_v2_model_runner``: on where Triton is), whose default is on
#: (``max_concurrent_batches`` = pp + 1). No release in between was read: cut-off *assumed* at
#: 0.32.0
VLLM_ASYNC_WITH_PP_SINCE: Version = (0, 32, 0)
#: the vLLM source file that decides async scheduling (flag, default and refusals)
VLLM_ASYNC_SCHEDULING_SOURCE = "vllm/config/vllm.py VllmConfig.__post_init__"


def vllm_async_scheduling_default(version: Version, pp: int) -> bool:
    """Whether vLLM ``version`` schedules asynchronously when ``--async-scheduling`` is not
    given: from 0.14.0; with pipeline parallel only from 0.32.0 (assumed cut-off, see
    :data:`VLLM_ASYNC_WITH_PP_SINCE`)."""
    if version < VLLM_ASYNC_SCHEDULING_DEFAULT_SINCE:
        return False
    return pp == 1 or version >= VLLM_ASYNC_WITH_PP_SINCE


#: first vLLM with ``VllmConfig.max_in_flight_tokens``: sliding-window and chunked-local specs
#: reserve for every batch in flight, ``max_concurrent_batches x max_num_batched_tokens``
#: (absent from the 0.25.0 wheel's ``vllm/config/vllm.py``, present in 0.26.0's and since)
VLLM_IN_FLIGHT_TOKENS_SINCE: Version = (0, 26, 0)


def vllm_concurrent_batches(version: Version, pp: int, async_scheduling: bool) -> int:
    """``VllmConfig.max_concurrent_batches`` as the sliding-window reservation counts it
    (vLLM 0.32.0 ``vllm/config/vllm.py`` lines 577-587): with async scheduling 2 batches, or
    ``pp + 1`` with pipeline parallel (the V2 model runner, the only one that schedules
    asynchronously with PP); without it ``pp``. Before 0.26.0 the reservation was one batch."""
    if version < VLLM_IN_FLIGHT_TOKENS_SINCE:
        return 1
    if async_scheduling:
        return pp + 1 if pp > 1 else 2
    return pp


@dataclass(frozen=True, slots=True)
class AsyncScheduling:
    """Whether a simulated vLLM replica schedules asynchronously, and why (one line)."""

    enabled: bool
    #: "flag" (``--async-scheduling`` / ``--no-async-scheduling`` given) or "version default"
    source: str
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"enabled": self.enabled, "source": self.source, "reason": self.reason}


def vllm_async_scheduling(version: Version, pp: int, flag: bool | None) -> AsyncScheduling:
    """vLLM's ``--async-scheduling`` as ``version`` resolves it: ``flag`` ``None`` (not given)
    is the version's default; ``True`` with pipeline parallel is refused where that version
    refuses it (one-line ConfigError naming the flag, the value and the fix)."""
    v = format_version(version)
    if flag is None:
        enabled = vllm_async_scheduling_default(version, pp)
        if version < VLLM_ASYNC_SCHEDULING_DEFAULT_SINCE:
            why = "off up to 0.13.0"
        elif enabled and pp > 1:
            why = (
                "on from 0.14.0, with pipeline parallel from 0.32.0 (V2 model runner; "
                "cut-off assumed)"
            )
        elif enabled:
            why = "on from 0.14.0"
        else:
            why = "off with pipeline parallel before 0.32.0 (cut-off assumed)"
        source = (
            VLLM_ASYNC_SCHEDULING_SOURCE
            if version >= VLLM_ASYNC_SCHEDULING_DEFAULT_SINCE
            else "vllm/config/scheduler.py SchedulerConfig.async_scheduling = False"
        )
        reason = f"vLLM {v}'s default: {why}; {source}"
        return AsyncScheduling(enabled, "version default", reason)
    if flag and pp > 1 and version < VLLM_ASYNC_WITH_PP_SINCE:
        raise ConfigError(
            f'async_scheduling: vLLM {v} refuses --async-scheduling with --pp {pp} ("Async '
            'scheduling is not yet compatible with pipeline_parallel_size > 1.", '
            f"{VLLM_ASYNC_SCHEDULING_SOURCE} in 0.13.0-0.14.0); drop --async-scheduling, use "
            f"--pp 1, or pass --engine-version {format_version(VLLM_ASYNC_WITH_PP_SINCE)}",
            field="async_scheduling",
        )
    spelled = "--async-scheduling" if flag else "--no-async-scheduling"
    return AsyncScheduling(flag, "flag", f"{spelled} given (vLLM {v})")


def check_vllm_kv_dtype(name: str, version: Version) -> None:
    """Refuse a ``--kv-cache-dtype`` this vLLM version does not accept (one-line ConfigError)."""
    since = VLLM_KV_DTYPE_SINCE.get(name)
    if since is None or version >= since:
        return
    accepted = [k for k, v in VLLM_KV_DTYPE_SINCE.items() if version >= v]
    raise ConfigError(
        f"kv_dtype: vLLM {format_version(version)} does not accept --kv-cache-dtype {name} "
        f"(first in {format_version(since)} or later); choose one of {', '.join(accepted)} "
        f"or pass --engine-version {format_version(since)} or newer",
        field="kv_dtype",
    )


def check_vllm_block_size(block_size: int, version: Version) -> None:
    """Refuse a ``--block-size`` outside the version's ``BlockSize`` literal (reference §3.4).

    v0.9/0.10 accept 1, 8, 16, 32, 64, 128; v0.11-0.16 add 256; the newest accept any int > 0.
    Other eras are not checked (the reference pins no list for them).
    """
    if (0, 9, 0) <= version < (0, 11, 0):
        allowed: tuple[int, ...] = (1, 8, 16, 32, 64, 128)
    elif (0, 11, 0) <= version < (0, 17, 0):
        allowed = (1, 8, 16, 32, 64, 128, 256)
    else:
        return
    if block_size not in allowed:
        raise ConfigError(
            f"block_size: vLLM {format_version(version)} does not accept --block-size "
            f"{block_size}; choose one of {', '.join(map(str, allowed))}",
            field="block_size",
        )


def format_version(v: Version) -> str:
    return ".".join(str(x) for x in v)
