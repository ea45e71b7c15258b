"""``deploy``'s per-engine entries: what it renders for each engine, keyed by the engine's name.

An engine is rendered by one module of :mod:`kvbudget.deploy.engines` that calls
:func:`register_deploy_engine` with a :class:`DeployEngine`; the modules are found by scanning
the package (as ``capacity``'s engine folders are), so a new engine is a new module here beside
its ``capacity/engines/<name>/`` folder, and no table elsewhere names it. An engine with no
entry is refused in one line (:func:`deploy_engine`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kvbudget.engine_name import engine_names
from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.accept.plan.lock import ObjectLock


class ArgvFn(Protocol):
    """The engine's launch argv from the lock; records each flag's source in ``sources``."""

    def __call__(
        self, lock: ObjectLock, model: str, port: int, sources: dict[str, str]
    ) -> list[str]: ...


class MultinodeFn(Protocol):
    """Leader and worker shell commands spreading ``argv`` (shell-quoted, ``$`` doubled) over
    ``num_nodes`` pods of a LeaderWorkerSet."""

    def __call__(self, argv: str, num_nodes: int) -> tuple[str, str]: ...


#: the unified names of the metric series the alerts and the autoscaler read
SERIES_KEYS = (
    "kv_usage",
    "waiting",
    "preemptions",
    "ttft_bucket",
    "tpot_bucket",
    "queue_bucket",
    "prefix_hits",
    "prefix_queries",
)


@dataclass(frozen=True, slots=True)
class DeployEngine:
    """One engine as ``deploy`` renders it.

    ``image`` is the default image, ``{version}`` the lock's engine version; ``multinode``
    ``None``: the engine runs in one pod; ``async_scheduling``: it has vLLM's
    ``--async-scheduling``; ``shutdown_timeout``: it has vLLM's ``--shutdown-timeout``;
    ``series``: unified name (:data:`SERIES_KEYS`) -> its Prometheus series (absent: not exported).
    """

    name: str
    argv: ArgvFn
    image: str
    health_path: str = "/health"
    multinode: MultinodeFn | None = None
    async_scheduling: bool = False
    shutdown_timeout: bool = False
    series: Mapping[str, str | None] = field(default_factory=dict)

    def series_of(self, key: str) -> str | None:
        """The engine's series for unified name ``key`` (``None``: it exports none)."""
        if key not in SERIES_KEYS:
            raise KeyError(f"unknown series {key!r}; one of {', '.join(SERIES_KEYS)}")
        return self.series.get(key)


_REGISTRY: dict[str, DeployEngine] = {}
_scanned: list[bool] = []  # non-empty once the engine modules were imported


def register_deploy_engine(engine: DeployEngine) -> DeployEngine:
    """Add ``engine`` (its module calls this once); a name registered twice is refused."""
    if engine.name in _REGISTRY and _REGISTRY[engine.name] is not engine:
        raise ValueError(f"deploy engine {engine.name!r} is registered twice")
    unknown = set(engine.series) - set(SERIES_KEYS)
    if unknown:
        raise ValueError(f"deploy engine {engine.name!r}: unknown series {sorted(unknown)}")
    _REGISTRY[engine.name] = engine
    return engine


def _scan() -> None:
    if _scanned:
        return
    from kvbudget.capacity.engines.registry import registered_engines
    from kvbudget.deploy import engines

    registered_engines()  # the engines' names (and aliases) registered by their folders

    for info in pkgutil.iter_modules(engines.__path__):
        if info.name != "registry":
            importlib.import_module(f"{engines.__name__}.{info.name}")
    _scanned.append(True)


def deploy_engines() -> tuple[str, ...]:
    """The engines ``deploy`` renders, in the order kvbudget lists engines."""
    _scan()
    order = {name: i for i, name in enumerate(engine_names())}
    return tuple(sorted(_REGISTRY, key=lambda n: (order.get(n, len(order)), n)))


def deploy_engine(name: str) -> DeployEngine:
    """The entry of engine ``name``, or one line naming the field, the value and the choices."""
    _scan()
    engine = _REGISTRY.get(name)
    if engine is None:
        raise ConfigError(
            f"lock.engine.name: kvbudget deploy renders {spelled(deploy_engines())} "
            f"(got {name!r}); fix the engine name",
            field="lock.engine.name",
        )
    return engine


def spelled(names: tuple[str, ...]) -> str:
    """``a, b or c``."""
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1] if names else "")))
