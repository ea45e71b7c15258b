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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kvbudget.capacity.dtypes import KvDtypeRules, register_kv_dtypes
from kvbudget.engine_name import register_engine_name
from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.capacity.kv_checkpoint import CheckpointKv
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
    is the planner's. An optional ``pp_split(request, model)`` returns how the engine splits
    the layers over ``--pp`` (``layouts.base.PpSplit``; vLLM's ``get_pp_indices`` without it).
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
class PoolWording:
    """How an engine's memory arithmetic is described (``plan``'s text, the web), registered with
    the engine so the renderers do not branch on its name. ``{utilization}`` is the rank's
    fraction; the defaults are vLLM's words (``gpu_memory_utilization``)."""

    #: how the requested bytes are computed
    requested: str = "total x gpu_memory_utilization {utilization}"
    #: how the KV bytes available are computed
    available: str = "requested - non-KV terms"
    #: the web's line for the KV bytes per GPU
    available_web: str = (
        "total × gpu_memory_utilization {utilization} − weights, activation, non-torch "
        "(and graphs where subtracted)"
    )
    #: the CUDA-graph term is subtracted by some versions only (a note says which)
    graphs_by_version: bool = True


@dataclass(frozen=True, slots=True)
class RegisteredEngine:
    """An engine's registration: its name, its layout and, if ``plan`` models it, its planner.

    The other fields are what the shared code asks of an engine instead of comparing its name:

    * ``serves``: a serving engine (its name joins :mod:`kvbudget.engine_name`, with
      ``aliases`` and ``reported``, the name its server reports); ``False`` for a layout only
      (``hf``, transformers' own cache);
    * ``listed_at``: where ``--engine`` lists it (the built-ins first, in their order);
    * ``has_blocks``: its layout has ``--block-size`` blocks (``calc`` records the block size);
    * ``picks_kv_dtype``: its layout may store another KV dtype than asked (vLLM's
      ``fp8_ds_mla`` for DeepSeek-V4), which ``calc`` then describes;
    * ``group_blocks``: its plan charges blocks per KV cache group (vLLM's hybrid manager), so
      the window charge and the close call read the groups;
    * ``token_pool``: its plan is one pool of pages shared by all layers (SGLang): a sequence
      holds ``ceil(tokens / page)`` pages;
    * ``auto_fit``: ``--max-model-len auto`` (vLLM's ``-1``); ``utilization_flag``: it takes
      ``--gpu-memory-utilization``; ``cpu_build``: a plan without a device is its CPU build's
      (vLLM: its fp8 and SSM notes);
    * ``slot_cells``: its layout is llama.cpp's cells, with ``-c``/``-np``/``-kvu``/``-ctk``/
      ``-ctv`` (``calc`` takes those flags and splits the cells per slot);
    * ``wording``: how ``plan``'s text and the web describe its memory arithmetic;
    * ``kv_dtypes`` and ``kv_dtype_rules``: the KV dtypes of an engine added later (the built-in
      engines' rows are ``capacity.dtypes``' own, which the layouts read without this registry);
    * ``prefix_layout``: (default block or page size in tokens, prefix-cache hash) that
      ``fingerprint`` keys a cache layout by; ``None``: a layout only (no server to share with);
    * ``label``: how the web page names it (``None``: its name); ``default_version``: the
      version planned when none is given; ``kv_dtype_since``: the first version accepting each
      KV dtype name (the page offers only the ones the typed version accepts).
    * ``checkpoint_kv``: what its ``--kv-cache-dtype auto`` becomes on a checkpoint that
      quantizes its KV cache, at the version ``calc`` assumes (:mod:`..kv_checkpoint`); ``None``:
      ``auto`` is always the model dtype.
    """

    name: str
    layout: LayoutFn
    planner: EnginePlanner | None = None
    serves: bool = True
    aliases: tuple[str, ...] = ()
    reported: str | None = None
    listed_at: int = 1000
    has_blocks: bool = False
    picks_kv_dtype: bool = False
    group_blocks: bool = False
    token_pool: bool = False
    slot_cells: bool = False
    auto_fit: bool = False
    utilization_flag: bool = False
    cpu_build: bool = False
    wording: PoolWording = field(default_factory=PoolWording)
    kv_dtypes: tuple[str, ...] | None = None
    kv_dtype_rules: KvDtypeRules = field(default_factory=KvDtypeRules)
    prefix_layout: tuple[str, str] | None = None
    label: str | None = None
    default_version: str | None = None
    kv_dtype_since: Mapping[str, str] = field(default_factory=dict)
    checkpoint_kv: Callable[[ModelSpec, str], CheckpointKv | None] | None = None


_REGISTRY: dict[str, RegisteredEngine] = {}
_scanned: list[bool] = []  # non-empty once the engine folders were imported


def register_engine(engine: RegisteredEngine) -> RegisteredEngine:
    """Add ``engine`` to the registry (an engine folder's ``__init__`` calls this once); a
    serving engine's name also joins :mod:`kvbudget.engine_name`'s register."""
    if engine.name in _REGISTRY and _REGISTRY[engine.name] is not engine:
        raise ValueError(f"engine {engine.name!r} is registered twice")
    if engine.kv_dtypes is not None:
        register_kv_dtypes(engine.name, engine.kv_dtypes, engine.kv_dtype_rules)
    if engine.serves:
        register_engine_name(engine.name, aliases=engine.aliases, reported=engine.reported)
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
    """Every registered engine by name (a copy), in the order ``--engine`` lists them."""
    _scan()
    return {e.name: e for e in sorted(_REGISTRY.values(), key=lambda e: (e.listed_at, e.name))}


def layout_names() -> tuple[str, ...]:
    """The layouts ``calc --engine`` applies: every registered engine, ``hf`` first."""
    return tuple(registered_engines())


def fingerprinted_engines() -> tuple[str, ...]:
    """The engines ``fingerprint --engine`` keys: those registered with a ``prefix_layout``."""
    return tuple(n for n, e in registered_engines().items() if e.prefix_layout is not None)


def planned_engines() -> tuple[str, ...]:
    """The engines ``plan --engine`` plans: those registered with a planner."""
    return tuple(n for n, e in registered_engines().items() if e.planner is not None)


def engine_entry(name: str) -> RegisteredEngine:
    """The engine registered as ``name``, or a one-line refusal naming the known ones."""
    _scan()
    engine = _REGISTRY.get(name)
    if engine is None:
        raise ConfigError(
            f"engine: {name!r} is unknown; choose one of {', '.join(layout_names())}",
            field="engine",
        )
    return engine


def engine_is(name: str, has: Callable[[RegisteredEngine], bool]) -> bool:
    """Whether the engine registered as ``name`` has a property (``False`` when none is)."""
    _scan()
    engine = _REGISTRY.get(name)
    return engine is not None and has(engine)


def parse_layout(text: str) -> str:
    """``text`` as a registered layout, or the one-line refusal naming ``engine`` and the choices."""
    return engine_entry(text).name


def planned_engine(name: str) -> str | None:
    """``name`` as an engine ``make_plan`` models, or ``None`` (``llamacpp``, the ``hf`` layout)."""
    _scan()
    engine = _REGISTRY.get(name)
    return name if engine is not None and engine.planner is not None else None


def engine_planner(name: str) -> EnginePlanner:
    """The planner of engine ``name``, or a one-line refusal when ``plan`` does not model it."""
    planner = engine_entry(name).planner
    if planner is None:
        raise ConfigError(
            f"engine: {name!r} has no block pool kvbudget plans; choose one of "
            f"{', '.join(planned_engines())}",
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
