"""The grid file of ``kvbudget sweep``: a base scenario, axes, SLOs and optional GPU prices.

Schema (YAML, ``extra="forbid"``; see docs/commands/sweep.md)::

    base:                       # a kvbudget sim scenario (docs/simulator.md); every point starts here
      workload: {num_requests: 2000, input_tokens: {kind: fixed, value: 1024}}
    grid:                       # every combination of the listed values is one point
      model: [meta-llama/Llama-3.1-8B]
      gpu: [H100-SXM, A100-80GB]
      tp: [1, 2]
      quantization: [none, fp8]   # also pp, engine_version: plan's engine inputs
      kv_dtype: [auto, fp8]
      max_model_len: [8192]
      prefix_caching: [true, false]
      router: [round_robin, prefix_precise]
      replicas: [1, 2, 4]
      rate_per_s: [5, 10, 20]   # Poisson arrivals, requests/s (kvbudget sim --rate)
    slos:
      - {name: chat, ttft_s: {p99: 0.5}, tpot_s: {p99: 0.05}}
    gpu_hour_usd: {H100-SXM: 2.99, A100-80GB: 1.79}

Each point is a complete :class:`~kvbudget.sim.scenario.SimScenario` (validated before anything
runs, so a bad value is one line naming the field); its key is a hash of that scenario's
canonical JSON, so the same point has the same key in every run (resume skips it).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError

from kvbudget.errors import ConfigError
from kvbudget.safety.limits import MAX_SWEEP_POINTS
from kvbudget.safety.yamlload import load_yaml_text, read_text_file
from kvbudget.sim.scenario import SimScenario, scenario_from_dict
from kvbudget.spec.hardware import get_gpu, load_gpu_catalog
from kvbudget.validation import first_problem, problem_line

DOCS = "docs/commands/sweep.md"
PERCENTILES = ("p50", "p90", "p95", "p99")
#: grid axes, in the order they appear in results (the column order of results.csv)
AXES = (
    "model",
    "gpu",
    "tp",
    "pp",
    "engine_version",
    "quantization",
    "async_scheduling",
    "kv_dtype",
    "max_model_len",
    "max_num_seqs",
    "gpu_memory_utilization",
    "prefix_caching",
    "router",
    "replicas",
    "rate_per_s",
)


class GridAxes(BaseModel):
    """Values to sweep; an axis left out keeps the base scenario's value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: list[str] | None = Field(None, min_length=1)
    gpu: list[str] | None = Field(None, min_length=1)
    tp: list[int] | None = Field(None, min_length=1)
    pp: list[int] | None = Field(None, min_length=1)
    #: vLLM versions (their defaults and arithmetic, as plan)
    engine_version: list[str] | None = Field(None, min_length=1)
    #: vLLM --quantization of the weights (``none``: unquantized)
    quantization: list[str] | None = Field(None, min_length=1)
    #: vLLM --async-scheduling (true) / --no-async-scheduling (false); left out: each
    #: point's engine version's default
    async_scheduling: list[bool] | None = Field(None, min_length=1)
    kv_dtype: list[str] | None = Field(None, min_length=1)
    max_model_len: list[int] | None = Field(None, min_length=1)
    max_num_seqs: list[int] | None = Field(None, min_length=1)
    gpu_memory_utilization: list[float] | None = Field(None, min_length=1)
    prefix_caching: list[bool] | None = Field(None, min_length=1)
    router: list[str] | None = Field(None, min_length=1)
    replicas: list[int] | None = Field(None, min_length=1)
    rate_per_s: list[float] | None = Field(None, min_length=1)


class Ceilings(BaseModel):
    """Percentile ceilings of one latency, seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p50: float | None = Field(None, gt=0)
    p90: float | None = Field(None, gt=0)
    p95: float | None = Field(None, gt=0)
    p99: float | None = Field(None, gt=0)

    def items(self) -> list[tuple[str, float]]:
        return [(p, v) for p in PERCENTILES if (v := getattr(self, p)) is not None]


class SweepSlo(BaseModel):
    """A named SLO: every request finished and each percentile ceiling held."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$")
    ttft_s: Ceilings = Field(default_factory=Ceilings)
    tpot_s: Ceilings = Field(default_factory=Ceilings)


class GridFile(BaseModel):
    """The whole grid file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: dict[str, Any] = Field(default_factory=dict)
    grid: GridAxes = Field(default_factory=GridAxes)
    slos: list[SweepSlo] = Field(default_factory=list)
    gpu_hour_usd: dict[str, PositiveFloat] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One configuration of the grid: its axis values, its scenario and its stable key."""

    key: str
    axes: dict[str, Any]
    scenario: dict[str, Any]


def load_grid(path: str | Path) -> GridFile:
    """Read and validate a grid file; the first problem is one line naming the field."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"grid {path}: file not found; give a YAML grid file (see {DOCS})")
    try:
        data = load_yaml_text(read_text_file(file, what="grid"), source=f"grid {file.name}")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"grid {path}: cannot read it ({exc}); check the file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"grid {file.name}{where}: {problem}; fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"grid {file.name}: expected a mapping (base, grid, slos, gpu_hour_usd) at the top, "
            f"got {type(data).__name__}; start from the example in {DOCS}"
        )
    return grid_from_dict(data, origin=file.name)


def grid_from_dict(data: dict[str, Any], *, origin: str = "the grid") -> GridFile:
    try:
        grid = GridFile.model_validate(data)
    except ValidationError as exc:
        problem = first_problem(exc)
        text = problem_line(problem, what="grid", origin=origin, docs=DOCS)
        raise ConfigError(text, field=problem.where or "grid") from None
    check_grid_size(grid, origin=origin)
    names = [s.name for s in grid.slos]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(
            f"slos in {origin}: name {dup[0]!r} is used twice; give each SLO its own name",
            field="slos",
        )
    for slo in grid.slos:
        if not slo.ttft_s.items() and not slo.tpot_s.items():
            raise ConfigError(
                f"slos.{slo.name} in {origin}: no ceiling; give e.g. ttft_s: {{p99: 0.5}}",
                field=f"slos.{slo.name}",
            )
    return grid


def grid_size(grid: GridFile) -> int:
    """Points the grid asks for: the product of its axes' lengths (before de-duplication)."""
    size = 1
    for name in AXES:
        values = getattr(grid.grid, name)
        if values is not None:
            size *= len(values)
    return size


def check_grid_size(grid: GridFile, *, origin: str = "the grid") -> None:
    """Refuse a grid of more than MAX_SWEEP_POINTS points before any point is built
    (docs/limits.md): one line with the size, the axes and the bound."""
    size = grid_size(grid)
    if size > MAX_SWEEP_POINTS:
        lengths = " x ".join(
            f"{name} {len(values)}"
            for name in AXES
            if (values := getattr(grid.grid, name)) is not None
        )
        raise ConfigError(
            f"grid in {origin}: {size:,} points ({lengths}) is more than the limit of "
            f"{MAX_SWEEP_POINTS:,} points a sweep; split the grid or drop values (docs/limits.md)",
            field="grid",
        )


#: scenario fields added after keys were first written, with their defaults: left out of the
#: key while at the default, so a point that does not use them keeps its key (resume)
_LATER_FIELDS = {
    "pp": 1,
    "engine_version": None,
    "quantization": None,
    "enable_expert_parallel": False,
    "data_parallel_size": 1,
    "async_scheduling": None,
    "timing_model": None,
    "disaggregation": None,
}


def point_key(scenario: dict[str, Any]) -> str:
    """Stable key of a point: sha256 of its validated scenario's canonical JSON (16 hex)."""
    kept = {k: v for k, v in scenario.items() if k not in _LATER_FIELDS or v != _LATER_FIELDS[k]}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _with_rate(workload: dict[str, Any], rate_per_s: float) -> dict[str, Any]:
    out = dict(workload)
    out["arrivals"] = {"kind": "poisson", "rate_per_s": rate_per_s}
    return out


def expand(grid: GridFile, *, origin: str = "the grid") -> list[SweepPoint]:
    """Every combination of the axes as a validated scenario, in a fixed order."""
    check_grid_size(grid, origin=origin)  # a GridFile built without grid_from_dict too
    base = dict(grid.base)
    scenario_from_dict(dict(base), origin=f"{origin} base")  # base mistakes name the base
    for gpu in grid.grid.gpu or [base.get("gpu") or SimScenario().gpu]:
        try:
            get_gpu(str(gpu))
        except ConfigError:
            ids = ", ".join(g.id for g in load_gpu_catalog())
            raise ConfigError(
                f"grid field grid.gpu={gpu!r} in {origin}: unknown GPU; choose one of {ids} "
                "(kvbudget gpus)",
                field="grid.gpu",
            ) from None
    axes = {name: values for name in AXES if (values := getattr(grid.grid, name)) is not None}
    names = list(axes)
    points: list[SweepPoint] = []
    seen: set[str] = set()
    for combo in itertools.product(*(axes[n] for n in names)):
        values = dict(zip(names, combo, strict=True))
        data = dict(base)
        for name, value in values.items():
            if name == "rate_per_s":
                if value <= 0:
                    raise ConfigError(
                        f"grid field grid.rate_per_s={value} in {origin}: must be > 0 "
                        "requests/s; fix the value",
                        field="grid.rate_per_s",
                    )
                workload = data.get("workload") or SimScenario().workload
                data["workload"] = _with_rate(workload, float(value))
            else:
                data[name] = value
        label = ", ".join(f"{k}={v}" for k, v in values.items()) or "the base scenario"
        where = f"{origin} point ({label})"
        try:
            scenario = scenario_from_dict(data, origin=where)
        except ConfigError as exc:
            if where in str(exc):
                raise
            raise ConfigError(f"{exc} (in {where})", field=exc.field) from None
        dumped = scenario.model_dump(mode="json")
        key = point_key(dumped)
        if key in seen:
            continue
        seen.add(key)
        points.append(SweepPoint(key=key, axes=_axis_values(dumped), scenario=dumped))
    return points


def _axis_values(scenario: dict[str, Any]) -> dict[str, Any]:
    """Every axis's value at this point (swept or from the base)."""
    out = {name: scenario.get(name) for name in AXES if name != "rate_per_s"}
    arrivals = (scenario.get("workload") or {}).get("arrivals") or {}
    out["rate_per_s"] = arrivals.get("rate_per_s")
    return out
