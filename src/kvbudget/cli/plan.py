"""``kvbudget plan`` (engine pool, three budgets, scenarios) and ``kvbudget gpus`` (GPU catalog)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError

from kvbudget.capacity.budget import three_budgets
from kvbudget.capacity.close_call import plan_close_call
from kvbudget.capacity.plan_types import PLAN_ENGINES, PlanRequest
from kvbudget.capacity.planner import engine_flag_conflicts, make_plan
from kvbudget.capacity.scenarios import (
    LengthDistribution,
    Scenario,
    default_scenarios,
    evaluate_scenario,
)
from kvbudget.cli.plan_render import render_gpus, render_plan
from kvbudget.cli.vocab import (
    ASYNC_SCHEDULING,
    ASYNC_SCHEDULING_HELP,
    COUNT,
    DP,
    DP_HELP,
    ENGINE_VERSION_HELP,
    KV_DTYPE,
    KV_DTYPE_HELP,
    PP,
    PP_HELP,
    QUANTIZATION_HELP,
    TP,
)
from kvbudget.errors import ConfigError, SpecError, shown_value
from kvbudget.safety.cpu_features import (
    host_cpu_features,
    vllm_cpu_fp8_refusal,
    vllm_cpu_ssm_note,
)
from kvbudget.safety.yamlload import load_yaml_text, read_text_file
from kvbudget.spec.hardware import load_gpu_catalog
from kvbudget.spec.model import ModelSpec
from kvbudget.units import parse_bytes, parse_count
from kvbudget.validation import first_problem

#: exit status when the plan is computed but one max-length request does not fit
EXIT_DOES_NOT_FIT = 3

_SIZE_FLAGS = {
    "gpu_memory": "gpu_memory_bytes",
    "kv_cache_memory": "kv_cache_memory_bytes",
    "weights_bytes": "weights_bytes",
    "activation_bytes": "activation_bytes",
    "non_torch_bytes": "non_torch_bytes",
    "cudagraph_bytes": "cudagraph_bytes",
}
_COUNT_FLAGS = ("max_model_len", "max_num_batched_tokens", "max_num_seqs", "max_total_tokens")
_PLAIN_FLAGS = (
    "model",
    "gpu",
    "gpu_bf16_tflops",
    "gpu_bandwidth",
    "tp",
    "pp",
    "data_parallel_size",
    "async_scheduling",
    "engine",
    "engine_version",
    "gpu_memory_utilization",
    "kv_dtype",
    "block_size",
    "snapshot",
    "mamba_cache_mode",
    "mamba_cache_dtype",
    "mamba_ssm_cache_dtype",
    "quantization",
    "dtype",
    "speculative_config",
    "mem_fraction_static",
    "page_size",
    "swa_full_tokens_ratio",
    "headroom_fraction",
    "num_gpu_blocks_override",
    "disable_hybrid_kv_cache_manager",
    "enforce_eager",
)


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
    fields: dict[str, Any] = {}
    for key, value in data.items():
        if key.endswith("_bytes") and isinstance(value, str):
            fields[key] = parse_bytes(value, field=key)
        elif key in _COUNT_FLAGS and isinstance(value, str):
            fields[key] = parse_count(value, field=key)
        else:
            fields[key] = value
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
    """Merge the YAML fields with the flags the user gave (flags win)."""
    merged = dict(file_fields)
    for flag, key in _SIZE_FLAGS.items():
        if flags.get(flag) is not None:
            merged[key] = parse_bytes(flags[flag], field=flag)
    if str(flags.get("max_model_len", "")).strip().lower() in ("auto", "-1"):
        merged["auto_fit_max_model_len"] = True
        flags = {**flags, "max_model_len": None}
    for key in _COUNT_FLAGS:
        if flags.get(key) is not None:
            merged[key] = parse_count(flags[key], field=key)
    for key in _PLAIN_FLAGS:
        if flags.get(key) is not None:
            merged["gpu_bandwidth_gb_s" if key == "gpu_bandwidth" else key] = flags[key]
    if flags.get("llm_class"):
        merged["api_server"] = False
    if os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true"):
        merged.setdefault("allow_long_max_model_len", True)  # as vLLM reads it (envs.py)
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
        missing = ", ".join(resolved.missing) or "unknown fields"
        raise SpecError(
            f"model: {model!r} is {resolved.status}: {resolved.reason or 'cannot be mapped'}; "
            f"supply {missing} with --set key=value or pass a config.json",
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
@click.option("--model", help="Catalog id, config.json path or snapshot directory.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config field (recorded as user-supplied).",
)
@click.option("--gpu", help="GPU from the catalog (see 'kvbudget gpus'), e.g. H100, L40S.")
@click.option(
    "--gpu-memory", help="Device memory per GPU, e.g. 80GiB (replaces the catalog value)."
)
@click.option("--gpu-bf16-tflops", type=float, help="Custom device: dense BF16 TFLOPS.")
@click.option("--gpu-bandwidth", type=float, help="Custom device: memory bandwidth in GB/s.")
@click.option(*TP, "tp", type=COUNT, help="Tensor-parallel size (default 1).")
@click.option(*PP, "pp", type=COUNT, help=PP_HELP)
@click.option(*DP, "data_parallel_size", type=COUNT, help=DP_HELP)
@click.option(
    ASYNC_SCHEDULING,
    "async_scheduling",
    default=None,
    help=ASYNC_SCHEDULING_HELP
    + " In plan: a sliding-window or chunked-local group reserves for 2 batches in flight "
    "with it on a GPU from vLLM 0.26.0 (max_in_flight_tokens); the CPU build keeps it off.",
)
@click.option(
    "--engine",
    type=click.Choice(PLAN_ENGINES),
    help="Engine whose pool to model (default vllm).",
)
@click.option("--engine-version", help=ENGINE_VERSION_HELP)
@click.option(
    "--gpu-memory-utilization",
    type=float,
    help="vLLM fraction of total device memory (default 0.9).",
)
@click.option(
    "--kv-cache-memory",
    "--kv-cache-memory-bytes",
    "kv_cache_memory",
    help="vLLM --kv-cache-memory-bytes: KV bytes per GPU, e.g. 20GiB; overrides utilization (SGLang: the rest memory for the pool).",
)
@click.option(
    "--max-model-len",
    help="Max tokens per request (default: the config's max_position_embeddings); 'auto' = vLLM's -1 auto-fit.",
)
@click.option("--max-num-batched-tokens", help="Tokens per step (default by device, vLLM §3.4).")
@click.option("--max-num-seqs", help="Max running sequences (SGLang: max_running_requests).")
@click.option(*KV_DTYPE, "kv_dtype", help=KV_DTYPE_HELP)
@click.option(
    "--block-size", type=COUNT, help="Tokens per block (vLLM default 16; MLA 64; MiniMax-M3 128)."
)
@click.option("--weights-bytes", help="Weights per GPU from an engine log, e.g. 27.72GiB.")
@click.option("--activation-bytes", help="Peak activation per GPU from an engine log.")
@click.option("--non-torch-bytes", help="Non-torch memory per GPU from an engine log.")
@click.option("--cudagraph-bytes", help="CUDA-graph memory per GPU from an engine log.")
@click.option(
    "--snapshot", help="Model snapshot directory: weights from model.safetensors.index.json."
)
@click.option(
    "--llm-class",
    is_flag=True,
    default=None,
    help="Use the LLM-class batch defaults instead of 'vllm serve'.",
)
@click.option(
    "--mamba-cache-mode",
    type=click.Choice(["none", "align", "all"]),
    help="vLLM mamba cache mode (default none).",
)
@click.option(
    "--mamba-cache-dtype",
    help="vLLM --mamba-cache-dtype: auto (model dtype), float32, bfloat16, float16 (default auto).",
)
@click.option(
    "--mamba-ssm-cache-dtype",
    help="vLLM --mamba-ssm-cache-dtype for the recurrent state (auto follows --mamba-cache-dtype; "
    "vLLM's CPU build resets it to float32).",
)
@click.option("--quantization", help=QUANTIZATION_HELP)
@click.option(
    "--dtype",
    type=click.Choice(["auto", "half", "float16", "bfloat16", "float", "float32"]),
    help="vLLM --dtype of weights and activations; with --kv-dtype auto also the KV element "
    "(float32 doubles both). auto: the config's dtype, float32 configs served in bfloat16.",
)
@click.option(
    "--speculative-config",
    help='vLLM --speculative-config JSON; a draft model ({"model": ID, '
    '"num_speculative_tokens": K}) adds its weights and its KV layers to the pool.',
)
@click.option(
    "--mem-fraction-static", type=float, help="SGLang mem_fraction_static (default by version)."
)
@click.option(
    "--swa-full-tokens-ratio",
    type=float,
    help="SGLang hybrid SWA pool: sliding-window tokens per full-attention token (off: sliding layers count as full).",
)
@click.option("--page-size", type=COUNT, help="SGLang page size in tokens (default 1).")
@click.option("--max-total-tokens", help="SGLang --max-total-tokens cap.")
@click.option(
    "--num-gpu-blocks-override", type=COUNT, help="vLLM --num-gpu-blocks-override (testing)."
)
@click.option(
    "--headroom-fraction",
    type=float,
    help="Device-peak margin as a fraction of device memory (default 0.03).",
)
@click.option(
    "--enforce-eager",
    is_flag=True,
    default=None,
    help="vLLM flag: no CUDA graphs, so no graph memory is taken from the KV budget.",
)
@click.option(
    "--disable-hybrid-kv-cache-manager",
    is_flag=True,
    default=None,
    help="vLLM flag: sliding/chunked layers pay the full length (one group).",
)
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
    if result.engine == "vllm" and not result.device_given:  # the CPU build's way to plan
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
