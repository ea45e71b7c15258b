"""Thin adapter from the web to the calculator and planner libraries.

Every call here is one the CLI makes too: ``calc_explicit`` / ``calc_model``
(``kvbudget calc``), ``make_plan`` + ``three_budgets`` (``kvbudget plan``) and the resolver. This
module parses request fields with the CLI's parsers and holds no KV arithmetic of its own.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvbudget.capacity.assumptions import CHECKLIST
from kvbudget.capacity.budget import StructuralBudget, structural_budget
from kvbudget.capacity.engines.registry import engine_is, planned_engines, registered_engines
from kvbudget.capacity.kvbytes import calc_explicit, calc_model
from kvbudget.capacity.layouts.base import Layout
from kvbudget.capacity.plan_types import Engine, PlanRequest, PlanResult, planned_engine
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.result import CalcResult
from kvbudget.errors import ConfigError, KvbudgetError, SpecError
from kvbudget.spec.catalog import find_catalog_entry, list_catalog
from kvbudget.spec.locate import ConfigSource
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import ResolvedModel, parse_overrides, resolve_config, resolve_model
from kvbudget.units import parse_bytes
from kvbudget.web.schemas import ExplicitCalcRequest, ModelRequest, count

#: label of a pasted config in the ledger
PASTED = "pasted config.json"
#: most points on the context-length chart
CHART_POINTS = 9


def assumption_catalog() -> list[dict[str, str]]:
    """The calculator's assumption checklist (``kvbudget calc --assume NAME``)."""
    return [{"key": name, "label": text, "detail": ""} for name, text in CHECKLIST.items()]


@lru_cache(maxsize=1)
def catalog_models() -> list[dict[str, str]]:
    """Catalog ids for the model picker, with the layer kinds the resolver finds."""
    models = []
    for entry in list_catalog():
        try:
            resolved = resolve_model(entry.model_id)
        except KvbudgetError as exc:  # one bad catalog file must not break the page
            models.append({"id": entry.model_id, "layer_kinds": f"unreadable: {exc.one_line()}"})
            continue
        if resolved.spec is None:
            kinds = "not applicable"
        else:
            kinds = ", ".join(f"{n} {k}" for k, n in resolved.spec.kind_counts().items())
        models.append({"id": entry.model_id, "layer_kinds": kinds})
    return models


def explicit(request: ExplicitCalcRequest) -> CalcResult:
    """``kvbudget calc --layers .. --kv-heads .. --head-dim .. --dtype-bytes .. --tokens .. --seqs ..``."""
    unknown = sorted(set(request.assumptions) - set(CHECKLIST))
    if unknown:
        raise ConfigError(
            f"assumptions: unknown item {unknown[0]!r}; the checklist is {', '.join(CHECKLIST)}",
            field="assumptions",
        )
    confirmed = {name for name, holds in request.assumptions.items() if holds}
    return calc_explicit(
        num_layers=count(request.layers, field="layers"),
        num_kv_heads=count(request.kv_heads, field="kv_heads"),
        head_dim=count(request.head_dim, field="head_dim"),
        dtype_bytes=count(request.dtype_bytes, field="dtype_bytes"),
        tokens=count(request.tokens, field="tokens"),
        seqs=count(request.seqs, field="seqs"),
        confirmed=confirmed,
    )


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """A model-mode request with its counts parsed by the CLI's parsers."""

    model: str | None
    config: dict[str, Any] | None
    engine: Layout
    engine_version: str | None
    kv_dtype: str
    tp: int
    pp: int
    gpu: str | None
    gpu_memory_bytes: int | None
    gpu_memory_utilization: float
    max_model_len: int | None
    seqs: int
    block_size: int | None
    overrides: tuple[str, ...] = ()
    #: vLLM's ``--max-model-len auto`` (-1): make_plan shrinks the length to what fits
    auto_fit: bool = False
    #: vLLM/SGLang ``--kv-cache-memory`` (bytes per GPU); replaces the utilization arithmetic
    kv_cache_memory_bytes: int | None = None

    @property
    def planned(self) -> Engine | None:
        """The engine ``make_plan`` models here; ``None`` for the others (the calculator's
        figures only)."""
        return planned_engine(self.engine)

    @classmethod
    def from_request(cls, request: ModelRequest) -> ModelInputs:
        if (request.model is None) == (request.config is None):
            raise ConfigError(
                "model: give exactly one of 'model' (a catalog id) or 'config' (a pasted config.json)",
                field="model",
            )
        raw_util = request.gpu_memory_utilization
        util = float(raw_util) if -2.0 <= raw_util <= 2.0 else float("nan")  # no int overflow
        if not 0.0 < util <= 1.0:
            raise ConfigError(
                f"gpu_memory_utilization: must be in (0, 1], got {str(raw_util)[:40]}; vLLM's "
                "default is 0.9",
                field="gpu_memory_utilization",
            )
        auto_fit = _is_auto(request.max_model_len)
        if auto_fit and not engine_is(request.engine, lambda e: e.auto_fit):
            fitting = " or ".join(n for n, e in registered_engines().items() if e.auto_fit)
            raise ConfigError(
                f"max_model_len: 'auto' is an auto-fit of engine {fitting} and engine is "
                f"{request.engine}; pick engine {fitting} or give a number of tokens",
                field="max_model_len",
            )
        kv_memory = _size(request.kv_cache_memory, field="kv_cache_memory", example="20GiB")
        if kv_memory is not None and planned_engine(request.engine) is None:
            raise ConfigError(
                f"kv_cache_memory: a knob of the engines plan models and engine is "
                f"{request.engine}; pick engine {' or '.join(planned_engines())}, or leave it empty",
                field="kv_cache_memory",
            )
        return cls(
            model=request.model,
            config=request.config,
            engine=request.engine,
            engine_version=(request.engine_version or "").strip() or None,
            kv_dtype=request.kv_dtype,
            tp=count(request.tp, field="tp"),
            pp=count(request.pp, field="pp"),
            gpu=request.gpu,
            gpu_memory_bytes=_size(request.gpu_memory, field="gpu_memory", example="80GiB"),
            gpu_memory_utilization=util,
            max_model_len=None
            if request.max_model_len is None or auto_fit
            else count(request.max_model_len, field="max_model_len"),
            seqs=count(request.seqs, field="seqs"),
            block_size=None
            if request.block_size is None
            else count(request.block_size, field="block_size"),
            overrides=tuple(request.overrides),
            auto_fit=auto_fit,
            kv_cache_memory_bytes=kv_memory,
        )


def _is_auto(raw: object) -> bool:
    """``--max-model-len auto`` / ``-1``, as ``kvbudget plan`` reads it."""
    return str(raw).strip().lower() in ("auto", "-1") if raw is not None else False


def _size(raw: int | str | None, *, field: str, example: str) -> int | None:
    """A size flag as the CLI reads it (``80GiB``, ``141GB``, bytes); empty means none."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    num_bytes = parse_bytes(raw, field=field)
    if num_bytes <= 0:
        raise ConfigError(
            f"{field}: must be a positive size, got {raw!r}; write e.g. {example}",
            field=field,
        )
    return num_bytes


def resolve(inputs: ModelInputs) -> ResolvedModel:
    """A catalog id or a pasted config.json -> the resolver's verdict (no files, no network).

    Only bundled catalog ids are accepted by name: the server never opens a path or the
    Hugging Face cache on behalf of a browser. Anything else is pasted as config.json.
    """
    overrides = parse_overrides(inputs.overrides) if inputs.overrides else None
    if inputs.config is not None:
        text = json.dumps(inputs.config, sort_keys=True).encode()
        name = inputs.config.get("_name_or_path")
        source = ConfigSource(
            model_id=name if isinstance(name, str) and name else PASTED,
            path=Path(PASTED),
            origin="file",
            sha256=hashlib.sha256(text).hexdigest(),
            revision=None,
            raw=inputs.config,
        )
        return resolve_config(source, overrides=overrides)
    assert inputs.model is not None
    entry = find_catalog_entry(inputs.model)
    if entry is None:
        raise SpecError(
            f"model: {inputs.model!r} is not a bundled catalog id; pick one from the list "
            "(kvbudget models) or paste the model's config.json",
            field="model",
        )
    return resolve_model(entry.model_id, overrides=overrides)


def calc(
    inputs: ModelInputs, resolved: ResolvedModel, num_tokens: int, num_seqs: int
) -> CalcResult:
    """``kvbudget calc --model ... --engine ... --tokens N --seqs S`` on the resolved model."""
    return calc_model(
        resolved.model_id,
        engine=inputs.engine,
        engine_source="flag",
        kv_dtype=inputs.kv_dtype,
        tokens=num_tokens,
        seqs=num_seqs,
        tp=inputs.tp,
        pp=inputs.pp,
        block_size=inputs.block_size if engine_is(inputs.engine, lambda e: e.has_blocks) else None,
        resolved=resolved,
    )


def plan_request(
    inputs: ModelInputs, engine: Engine, model_id: str, max_model_len: int | None
) -> PlanRequest:
    """The PlanRequest ``kvbudget plan`` builds from the same flags."""
    return PlanRequest(
        model=model_id,
        gpu=inputs.gpu,
        gpu_memory_bytes=inputs.gpu_memory_bytes,
        tp=inputs.tp,
        pp=inputs.pp,
        engine=engine,
        engine_version=inputs.engine_version,
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        max_model_len=max_model_len,
        auto_fit_max_model_len=inputs.auto_fit,
        kv_cache_memory_bytes=inputs.kv_cache_memory_bytes,
        kv_dtype=inputs.kv_dtype,
        block_size=inputs.block_size,
    )


def plan(
    inputs: ModelInputs, spec: ModelSpec, model_id: str, max_model_len: int | None
) -> PlanResult | None:
    """``make_plan`` for vLLM and SGLang; None for engines the planner does not model."""
    engine = inputs.planned
    if engine is None:
        return None
    return make_plan(plan_request(inputs, engine, model_id, max_model_len), spec)


def structural(
    inputs: ModelInputs, spec: ModelSpec, num_tokens: int, num_sequences: int
) -> StructuralBudget:
    """The engine-neutral structural budget, as ``kvbudget plan`` reports it."""
    return structural_budget(
        spec,
        kv_dtype=inputs.kv_dtype,
        engine=inputs.engine,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
    )


def explicit_command(request: ExplicitCalcRequest, result: CalcResult) -> str:
    """The ``kvbudget calc`` command line that gives the same document."""
    argv = ["kvbudget", "calc"]
    for name in ("layers", "kv_heads", "head_dim", "dtype_bytes", "tokens", "seqs"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(request, name))]
    for assumption in result.assumptions:
        if assumption.holds:
            argv += ["--assume", assumption.name]
    return shlex.join(argv)


def model_commands(inputs: ModelInputs, model_id: str, num_tokens: int) -> list[str]:
    """The ``kvbudget calc`` and ``kvbudget plan`` command lines behind a model-mode answer."""
    model = "config.json" if inputs.config is not None else model_id
    common = ["--model", model, "--tp", str(inputs.tp), "--pp", str(inputs.pp)]
    sets = [arg for pair in inputs.overrides for arg in ("--set", pair)]
    calc_argv = [
        "kvbudget",
        "calc",
        *common,
        "--engine",
        inputs.engine,
        "--kv-dtype",
        inputs.kv_dtype,
    ]
    calc_argv += ["--tokens", str(num_tokens), "--seqs", str(inputs.seqs), *sets]
    if inputs.block_size is not None and engine_is(inputs.engine, lambda e: e.has_blocks):
        calc_argv += ["--block-size", str(inputs.block_size)]
    commands = [shlex.join(calc_argv)]
    if inputs.planned is not None:
        plan_argv = ["kvbudget", "plan", *common, "--engine", inputs.engine]
        length = "auto" if inputs.auto_fit else str(num_tokens)
        plan_argv += ["--kv-dtype", inputs.kv_dtype, "--max-model-len", length]
        if engine_is(inputs.engine, lambda e: e.utilization_flag):  # plan refuses it else
            plan_argv += ["--gpu-memory-utilization", str(inputs.gpu_memory_utilization)]
        plan_argv += sets
        if inputs.gpu:
            plan_argv += ["--gpu", inputs.gpu]
        if inputs.gpu_memory_bytes is not None:
            plan_argv += ["--gpu-memory", str(inputs.gpu_memory_bytes)]
        if inputs.kv_cache_memory_bytes is not None:
            plan_argv += ["--kv-cache-memory", str(inputs.kv_cache_memory_bytes)]
        if inputs.engine_version:
            plan_argv += ["--engine-version", inputs.engine_version]
        if inputs.block_size is not None:
            plan_argv += ["--block-size", str(inputs.block_size)]
        commands.append(shlex.join(plan_argv))
    return commands


def context_lengths(max_model_len: int) -> list[int]:
    """Chart x values: powers of two from 1Ki below ``max_model_len``, then ``max_model_len``."""
    lengths = [1 << k for k in range(10, 25) if (1 << k) < max_model_len]
    lengths = lengths[-(CHART_POINTS - 1) :] if lengths else []
    return [*lengths, max_model_len]
