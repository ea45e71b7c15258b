"""``kvbudget plan`` (engine pool, three budgets, scenarios) and ``kvbudget gpus`` (GPU catalog)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError

from kvbudget.capacity.budget import three_budgets
from kvbudget.capacity.close_call import plan_close_call
from kvbudget.capacity.engines.registry import engine_entry
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import engine_flag_conflicts, make_plan
from kvbudget.capacity.scenarios import (
    LengthDistribution,
    Scenario,
    default_scenarios,
    evaluate_scenario,
)
from kvbudget.cli.model_options import (
    fields_from_env,
    fields_from_flags,
    model_options,
    parse_file_value,
)
from kvbudget.cli.plan_render import render_gpus, render_plan
from kvbudget.errors import ConfigError, SpecError, shown_value
from kvbudget.safety.cpu_features import (
    host_cpu_features,
    vllm_cpu_fp8_refusal,
    vllm_cpu_ssm_note,
)
from kvbudget.safety.yamlload import load_yaml_text, read_text_file
from kvbudget.spec.hardware import load_gpu_catalog
from kvbudget.spec.model import ModelSpec
from kvbudget.units import parse_count
from kvbudget.validation import first_problem

#: exit status when the plan is computed but one max-length request does not fit
EXIT_DOES_NOT_FIT = 3


def _validation_error(exc: ValidationError, where: str) -> ConfigError:
    problem = first_problem(exc)
    field = problem.where or "input"
    fix = ""
    if problem.kind == "extra_forbidden":
        fix = "; remove it or check the spelling (keys: docs/commands/plan.md, 'YAML keys')"
    value = shown_value(problem.value)
    return ConfigError(f"{where}{field}: {problem.message} (got {value}){fix}", field=field)


def load_plan_file(path: Path) -> tuple[dict[str, Any], list[Scenario] | None]:
    """A YAML plan file: PlanRequest keys (sizes like ``80GiB`` allowed) plus optional ``scenarios``."""
    try:
        text = read_text_file(path, what="config")
        data = load_yaml_text(text, source=f"config {str(path)!r}") or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(
            f"config: cannot read {path}: {' '.join(str(exc).split())}", field="config"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} must hold a mapping of plan fields", field="config")
    raw_scenarios = data.pop("scenarios", None)
    fields = {key: parse_file_value(PlanRequest, key, value) for key, value in data.items()}
    scenarios = None
    if raw_scenarios is not None:
        if not isinstance(raw_scenarios, list):
            raise ConfigError("config: scenarios must be a list", field="scenarios")
        try:
            scenarios = [Scenario(**item) for item in raw_scenarios]
        except (ValidationError, TypeError) as exc:
            if isinstance(exc, ValidationError):
                raise _validation_error(exc, f"config {path}: scenarios.") from exc
            raise ConfigError(
                f"config: scenarios entries must be mappings ({exc})", field="scenarios"
            ) from exc
    return fields, scenarios


def flag_scenario(lengths: str, concurrency: str | None, cpu_kv_tokens: str | None) -> Scenario:
    """One scenario from ``--lengths MEDIAN,P95`` / ``--concurrency`` / ``--cpu-kv-tokens``."""
    parts = [p.strip() for p in lengths.split(",")]
    if len(parts) != 2:
        raise ConfigError(
            f"lengths: expected MEDIAN,P95 (e.g. 2000,9000), got {lengths!r}", field="lengths"
        )
    median = parse_count(parts[0], field="lengths median")
    p95 = parse_count(parts[1], field="lengths p95")
    if p95 < median:
        raise ConfigError(
            f"lengths: p95 ({p95}) is below the median ({median}); write MEDIAN,P95 with P95 >= MEDIAN",
            field="lengths",
        )
    try:
        return Scenario(
            name="your mix",
            lengths=LengthDistribution(median_tokens=median, p95_tokens=p95),
            concurrency=parse_count(concurrency, field="concurrency") if concurrency else 64,
            duration_s=3600,
            quality_gate="set by you (not given on the command line)",
            cpu_kv_tokens=parse_count(cpu_kv_tokens, field="cpu_kv_tokens", minimum=0)
            if cpu_kv_tokens
            else 0,
            label="user-supplied length mix (planning input, not measured)",
        )
    except ValidationError as exc:
        raise _validation_error(exc, "") from exc


def build_request(file_fields: dict[str, Any], flags: dict[str, Any]) -> PlanRequest:
    """Merge the YAML fields with the flags the user gave (flags win; an environment variable
    such as ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` only fills what neither sets)."""
    merged = {
        **fields_from_env(PlanRequest),
        **file_fields,
        **fields_from_flags(PlanRequest, flags),
    }
    if "model" not in merged:
        raise ConfigError(
            "model: no model given; pass --model meta-llama/Llama-3.1-8B (see 'kvbudget models')",
            field="model",
        )
    try:
        request = PlanRequest(**merged)
    except ValidationError as exc:
        raise _validation_error(exc, "") from exc
    conflicts = engine_flag_conflicts(request)
    if conflicts:
        field, message = conflicts[0]
        raise ConfigError(message.replace("ignored", "refused") + " or drop it", field=field)
    return request


def resolve_spec(model: str, overrides: tuple[str, ...]) -> ModelSpec:
    from kvbudget.spec.resolve import parse_overrides, resolve_model

    resolved = resolve_model(
        model, overrides=parse_overrides(list(overrides)) if overrides else None
    )
    if resolved.spec is None:
        reason = resolved.reason or "cannot be mapped"
        if "--set" in reason:
            fix = ""  # the reason already names the fix
        elif resolved.missing:
            fix = (
                f"; supply {', '.join(resolved.missing)} with --set key=value or pass a config.json"
            )
        else:
            fix = "; pass a config.json, or use the explicit mode (--layers/--kv-heads/--head-dim)"
        raise SpecError(
            f"model: {model!r} is {resolved.status}: {reason}{fix}",
            field="model",
        )
    return resolved.spec


@click.command("plan")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML plan file (PlanRequest keys + optional scenarios); flags override it.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config field (recorded as user-supplied).",
)
@model_options(PlanRequest)  # one flag per PlanRequest field: its name, type and description
@click.option(
    "--lengths",
    metavar="MEDIAN,P95",
    help="Your length mix (tokens per sequence at its peak), e.g. 2000,9000; replaces the default scenarios.",
)
@click.option("--concurrency", help="Peak concurrent sequences for --lengths (default 64).")
@click.option("--cpu-kv-tokens", help="CPU KV tier size per replica in tokens, for --lengths.")
@click.option(
    "--no-scenarios", is_flag=True, help="Skip the conservative/neutral/high scenario table."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
def plan(
    config_path: Path | None,
    overrides: tuple[str, ...],
    lengths: str | None,
    concurrency: str | None,
    cpu_kv_tokens: str | None,
    no_scenarios: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Plan the engine's KV pool, the three budgets and the GPUs a load needs.

    All figures are computed (arithmetic on the engine's formulas), not measured. Exits 3 when
    one max-length request does not fit (the engine would refuse to start); the output then
    carries the engine's error text and the estimated maximum model length.
    """
    file_fields, scenarios = load_plan_file(config_path) if config_path else ({}, None)
    if lengths is not None:
        scenarios = [flag_scenario(lengths, concurrency, cpu_kv_tokens)]
    elif concurrency is not None or cpu_kv_tokens is not None:
        name = "concurrency" if concurrency is not None else "cpu_kv_tokens"
        raise ConfigError(
            f"{name}: --{name.replace('_', '-')} applies to --lengths MEDIAN,P95 only and would be "
            "ignored; add --lengths (e.g. 2000,9000) or drop it",
            field=name,
        )
    request = build_request(file_fields, flags)
    spec = resolve_spec(request.model, overrides)
    result = make_plan(request, spec)
    cpu_build = engine_entry(result.engine).cpu_build
    if cpu_build and not result.device_given:  # the CPU build's way to plan
        refusal = vllm_cpu_fp8_refusal(result.kv_dtype, host_cpu_features())
        if refusal is not None:
            click.echo(f"note: {refusal}", err=True)
        if any(g.kind == "mamba" for g in result.groups):
            ssm = vllm_cpu_ssm_note(request.mamba_ssm_cache_dtype, host_cpu_features())
            if ssm is not None:
                click.echo(f"note: {ssm}", err=True)
    budgets = three_budgets(result, spec)
    close = plan_close_call(result.engine, result.fits, result.ranks, result.needed_bytes)
    if no_scenarios:
        evaluated = []
    else:
        chosen = scenarios if scenarios is not None else default_scenarios(result.max_model_len)
        evaluated = [evaluate_scenario(result, s) for s in chosen]
    if as_json:
        doc = {
            "kind": "kvbudget.plan",
            "schema_version": 1,
            **result.to_dict(),
            "budgets": budgets.to_dict(),
            "close_call": None if close is None else close.to_dict(),
            "scenarios": [e.to_dict() for e in evaluated],
            "scenarios_source": "file"
            if scenarios is not None
            else "kvbudget defaults (planning assumption)",
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=False))
    else:
        render_plan(
            result,
            budgets,
            evaluated,
            default_scenarios_used=scenarios is None,
            close_call_text=None if close is None else close.text(),
        )
    if not result.fits:
        sys.exit(EXIT_DOES_NOT_FIT)


@click.command("gpus")
@click.option("--json", "as_json", is_flag=True, help="Print the catalog as JSON.")
def gpus(as_json: bool) -> None:
    """List the GPU catalog: memory as the device reports it, dense TFLOPS, bandwidths, sources."""
    catalog = load_gpu_catalog()
    if as_json:
        click.echo(
            json.dumps({"kind": "kvbudget.gpus", "gpus": [g.to_dict() for g in catalog]}, indent=2)
        )
        return
    render_gpus(catalog)
