"""The engine's command line, exactly as the plan's lock says, in each engine's own flag names.

Flag names were checked in the engines' sources:

* vLLM 0.32.0 ``vllm/engine/arg_utils.py`` (``--tensor-parallel-size``, ``--pipeline-parallel-size``,
  ``--max-model-len``, ``--block-size``, ``--gpu-memory-utilization``, ``--kv-cache-dtype``,
  ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``, ``--max-num-seqs``,
  ``--max-num-batched-tokens``, ``--kv-offloading-size`` (GiB, summed over TP ranks,
  ``vllm/config/cache.py``), ``--kv-offloading-backend``, ``--served-model-name``,
  ``--shutdown-timeout``); health ``GET /health`` (``entrypoints/serve/instrumentator/health.py``);
* SGLang ``python/sglang/srt/server_args.py`` (``--model-path``, ``--tp-size``, ``--pp-size``,
  ``--context-length``, ``--mem-fraction-static``, ``--page-size``, ``--kv-cache-dtype``,
  ``--max-running-requests``, ``--chunked-prefill-size``, ``--disable-radix-cache``,
  ``--enable-metrics``); health ``GET /health``;
* llama.cpp ``tools/server`` (``-m``, ``--ctx-size``, ``--parallel``, ``--cache-type-k``,
  ``--cache-type-v``, ``--metrics``; reference/llamacpp.md §1b, §3: the context is split evenly
  over the slots, so ``--ctx-size = max_model_len x max_num_seqs``); health ``GET /health``.

Every value comes from the lock. A flag in ``lock.engine.flags`` that the structured lock fields
already set must agree with them (else a one-line ``ConfigError``); other declared flags are
passed through verbatim after the rendered ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.engine_name import EngineName, engine_of
from kvbudget.errors import ConfigError

DEFAULT_PORT = 8000
#: first vLLM version whose arg_utils.py was read to have --shutdown-timeout (0 aborts, >0 waits)
SHUTDOWN_TIMEOUT_SINCE = (0, 32)
_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class EngineCommand:
    engine: EngineName
    argv: tuple[str, ...]
    health_path: str
    port: int
    #: flag -> where its value came from (lock field or lock.engine.flags)
    sources: dict[str, str]
    notes: tuple[str, ...] = ()


def lock_value(lock: ObjectLock, name: str) -> Any:
    return getattr(lock, name).value


def locked_flags(
    lock: ObjectLock, pairs: tuple[tuple[str, str], ...], sources: dict[str, str]
) -> list[str]:
    """``flag value`` for every (flag, lock field) pair whose field the lock sets; each flag's
    source recorded as ``lock.<field>``."""
    argv: list[str] = []
    for flag, name in pairs:
        value = lock_value(lock, name)
        if value is not None:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
            sources[flag] = f"lock.{name}"
    return argv


def engine_name(lock: ObjectLock) -> EngineName:
    """The lock's engine, one ``deploy`` renders, or one line naming the registered ones."""
    from kvbudget.deploy.engines.registry import deploy_engine

    text = str(lock.engine.name.value or "vllm")
    return deploy_engine(engine_of(text) or text).name


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = re.findall(r"\d+", text)
    return tuple(int(p) for p in parts[:3]) if parts else None


def supports_shutdown_timeout(lock: ObjectLock) -> bool:
    """vLLM's ``--shutdown-timeout`` (0 aborts, >0 waits for in-flight requests)."""
    version = _version(lock.engine.version.value)
    return version is None or version[:2] >= SHUTDOWN_TIMEOUT_SINCE


def offload_gib(lock: ObjectLock) -> float | None:
    """``lock.offload`` such as ``cpu:64GiB`` as GiB of host memory (None for ``none``)."""
    raw = str(lock.offload.value or "none").strip()
    if raw.lower() == "none":
        return None
    match = re.fullmatch(r"cpu:(\d+(?:\.\d+)?)\s*(GiB|GB|MiB)", raw)
    if match is None:
        raise ConfigError(
            f"lock.offload: expected 'none' or 'cpu:<size>GiB' (got {raw!r}); e.g. cpu:64GiB",
            field="lock.offload",
        )
    size = float(match.group(1))
    unit = match.group(2)
    return {"GiB": size, "GB": size * 1e9 / _GIB, "MiB": size / 1024}[unit]


def _split(flag: str) -> tuple[str, str | None]:
    name, eq, value = flag.partition("=")
    return name, (value if eq else None)


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def _merge_declared(argv: list[str], sources: dict[str, str], declared: list[str]) -> list[str]:
    rendered: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-"):
            nxt = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None
            rendered[token] = nxt
            i += 2 if nxt is not None else 1
        else:
            i += 1
    extra: list[str] = []
    j = 0
    while j < len(declared):
        name, value = _split(declared[j])
        if value is None and j + 1 < len(declared) and not declared[j + 1].startswith("-"):
            value = declared[j + 1]
            j += 1
        j += 1
        if name in rendered:
            have = rendered[name]
            if value is not None and have is not None and not _same(value, have):
                raise ConfigError(
                    f"lock.engine.flags: {name}={value} disagrees with the lock's structured "
                    f"value {have} ({sources.get(name, 'lock')}); make them the same",
                    field="lock.engine.flags",
                )
            continue
        extra += [name] if value is None else [name, value]
        sources[name] = "lock.engine.flags"
    return argv + extra


def engine_command(
    lock: ObjectLock,
    *,
    model_path: str | None = None,
    port: int = DEFAULT_PORT,
    shutdown_timeout_s: int | None = None,
) -> EngineCommand:
    """The launch command of one replica's engine (leader process when multi-node)."""
    from kvbudget.deploy.engines.registry import deploy_engine

    entry = deploy_engine(engine_name(lock))
    engine = entry.name
    if not entry.async_scheduling and lock.async_scheduling is not None:
        raise ConfigError(
            f"lock.async_scheduling: vLLM's --async-scheduling, not a flag of {engine}; drop "
            "lock.async_scheduling (or serve with vLLM)",
            field="lock.async_scheduling",
        )
    model = model_path or lock.model.id
    sources: dict[str, str] = {}
    notes: list[str] = []
    argv = entry.argv(lock, model, port, sources)
    declared = list(lock.engine.flags.value or [])
    argv = _merge_declared(argv, sources, declared)
    if (
        entry.shutdown_timeout
        and shutdown_timeout_s is not None
        and "--shutdown-timeout" not in argv
    ):
        if supports_shutdown_timeout(lock):
            argv += ["--shutdown-timeout", str(shutdown_timeout_s)]
            sources["--shutdown-timeout"] = "terminationGracePeriodSeconds minus the preStop drain"
        else:
            notes.append(
                f"vLLM {lock.engine.version.value}: --shutdown-timeout not rendered (read in vLLM "
                "0.32.0's arg_utils.py only); the preStop drain covers in-flight requests"
            )
    return EngineCommand(
        engine=engine,
        argv=tuple(argv),
        health_path=entry.health_path,
        port=port,
        sources=sources,
        notes=tuple(notes),
    )
