"""The engine registry: each engine's KV layout (``calc``) and planner (``plan``) behind one protocol.

An engine lives in its own folder, ``kvbudget/capacity/engines/<name>/``, whose ``__init__``
calls :func:`register_engine` with a :class:`RegisteredEngine`: the name ``calc --engine`` and
``plan --engine`` spell, the layout function, and (for engines whose block pool ``plan`` models)
an :class:`EnginePlanner`. The folders are found by scanning this package, so adding an engine
is a new folder and nothing else here; ``calc``'s ``run_layout`` and ``plan``'s ``make_plan``
look the engine up (:func:`engine_entry`, :func:`engine_planner`) instead of comparing strings.

The registry is the only process-wide state: filled once, on the first lookup, by importing
every engine folder; registering a name twice is refused, so two folders cannot both claim it.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.capacity.layouts.base import LayoutResult
    from kvbudget.capacity.plan_types import PlanRequest, PlanResult
    from kvbudget.capacity.weights import WeightsEstimate
    from kvbudget.spec.hardware import GpuSpec
    from kvbudget.spec.model import ModelSpec


@dataclass(frozen=True, slots=True)
class LayoutLoad:
    """What ``calc`` asks of a layout: the load, the parallel plan and the engine's knobs.

    ``block_size`` is vLLM's ``--block-size``; ``v_dtype``, ``ctx_size`` and ``unified`` are
    llama.cpp's ``-ctv``, ``-c`` and ``-kvu``. A layout refuses the knobs its engine does not
    have (:func:`refuse_llamacpp_knobs`, :func:`refuse_block_size`).
    """

    tokens: int
    seqs: int
    kv_dtype: str
    v_dtype: str | None
    tp: int
    pp: int
    dp: int
    block_size: int | None
    ctx_size: int | None = None
    unified: bool = False


class LayoutFn(Protocol):
    """One engine's KV layout: the bytes ``load`` holds on each rank of each pipeline stage."""

    def __call__(self, spec: ModelSpec, load: LayoutLoad) -> LayoutResult: ...


class EnginePlanner(Protocol):
    """One engine's ``plan``: its block pool for one replica of ``request``.

    ``make_plan`` resolves the model, the device, ``max_model_len`` and the weights, then hands
    them here; what differs between engines (defaults, memory terms, the pool, the log lines)
    is the planner's.
    """

    #: ``--kv-cache-memory`` sizes the pool without a device (vLLM); else a device is required
    pool_without_device: bool

    def check_request(self, request: PlanRequest) -> None:
        """Refuse, in one line, what this engine does not plan (before the weights are read)."""

    def plan(
        self,
        request: PlanRequest,
        model: ModelSpec,
        gpu: GpuSpec,
        weights: WeightsEstimate,
        max_model_len: int,
        device_given: bool,
    ) -> PlanResult:
        """The plan of one replica."""

    def flag_conflicts(self, request: PlanRequest) -> list[tuple[str, str]]:
        """``(field, message)`` for each knob set that this engine does not have (ignored)."""


@dataclass(frozen=True, slots=True)
class RegisteredEngine:
    """An engine's registration: its name, its layout and, if ``plan`` models it, its planner."""

    name: str
    layout: LayoutFn
    planner: EnginePlanner | None = None


_REGISTRY: dict[str, RegisteredEngine] = {}
_scanned: list[bool] = []  # non-empty once the engine folders were imported


def register_engine(engine: RegisteredEngine) -> RegisteredEngine:
    """Add ``engine`` to the registry (an engine folder's ``__init__`` calls this once)."""
    if engine.name in _REGISTRY and _REGISTRY[engine.name] is not engine:
        raise ValueError(f"engine {engine.name!r} is registered twice")
    _REGISTRY[engine.name] = engine
    return engine


def _scan() -> None:
    """Import every folder of :mod:`kvbudget.capacity.engines` (each registers its engine)."""
    if _scanned:
        return
    from kvbudget.capacity import engines

    for info in pkgutil.iter_modules(engines.__path__):
        if info.ispkg:
            importlib.import_module(f"{engines.__name__}.{info.name}")
    _scanned.append(True)


def registered_engines() -> dict[str, RegisteredEngine]:
    """Every registered engine by name (a copy)."""
    _scan()
    return dict(_REGISTRY)


def engine_entry(name: str) -> RegisteredEngine:
    """The engine registered as ``name``, or a one-line refusal naming the known ones."""
    _scan()
    engine = _REGISTRY.get(name)
    if engine is None:
        raise ConfigError(
            f"engine: {name!r} is unknown; choose one of {', '.join(sorted(_REGISTRY))}",
            field="engine",
        )
    return engine


def engine_planner(name: str) -> EnginePlanner:
    """The planner of engine ``name``, or a one-line refusal when ``plan`` does not model it."""
    planner = engine_entry(name).planner
    if planner is None:
        planned = sorted(n for n, e in _REGISTRY.items() if e.planner is not None)
        raise ConfigError(
            f"engine: {name!r} has no block pool kvbudget plans; choose one of {', '.join(planned)}",
            field="engine",
        )
    return planner


def refuse_llamacpp_knobs(load: LayoutLoad, layout: str) -> None:
    """``-c`` and ``-kvu`` are llama.cpp's; any other layout refuses them in one line."""
    if load.ctx_size is not None or load.unified:
        raise ConfigError(
            f"ctx_size/unified: llama.cpp knobs (-c, -kvu); use --engine llamacpp, not {layout}",
            field="ctx_size",
        )


def refuse_block_size(load: LayoutLoad, layout: str) -> None:
    """Only vLLM's layout has blocks; any other refuses ``--block-size`` in one line."""
    if load.block_size is not None:
        raise ConfigError(
            f"block_size: only the vllm layout has blocks; drop --block-size for {layout}",
            field="block_size",
        )
