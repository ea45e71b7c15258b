"""``plan``'s flags generated from ``PlanRequest``'s fields (kvbudget.cli.model_options).

Expected values are hand arithmetic on the written sizes (vLLM 0.32.0's ``human_readable_int``
and ``--kv-cache-memory-bytes``: ``G`` = 2^30, ``g`` = 10^9, ``K`` = 1,024, ``k`` = 1,000) and
the flag names of docs/flags.md's table, never read back from the builder.
"""

from __future__ import annotations

import json
from typing import Any

import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.cli.model_options import (
    fields_from_env,
    fields_from_flags,
    model_options,
    parse_file_value,
)
from kvbudget.cli.plan import plan
from kvbudget.errors import ConfigError

GiB = 2**30


def _command(model: type[BaseModel]) -> click.Command:
    @click.command()
    @model_options(model)
    def command(**flags: Any) -> dict[str, Any]:
        return fields_from_flags(model, flags)

    return command


def _fields(model: type[BaseModel], args: list[str]) -> dict[str, Any]:
    out = _command(model).main(args, standalone_mode=False)
    assert isinstance(out, dict)
    return out


def _request(args: list[str]) -> PlanRequest:
    return PlanRequest(model="meta-llama/Llama-3.1-8B", **_fields(PlanRequest, args))


def _option(command: click.Command, flag: str) -> click.Option:
    found = [p for p in command.params if isinstance(p, click.Option) and flag in p.opts]
    assert len(found) == 1, flag
    return found[0]


@pytest.mark.parametrize(
    ("args", "field", "expected"),
    [
        (["--gpu-memory", "80GiB"], "gpu_memory_bytes", 80 * GiB),
        (["--gpu-memory", "141GB"], "gpu_memory_bytes", 141 * 10**9),
        # vLLM's alias and its reading of a bare suffix: G is binary, g decimal
        (["--kv-cache-memory-bytes", "20G"], "kv_cache_memory_bytes", 20 * GiB),
        (["--kv-cache-memory", "20g"], "kv_cache_memory_bytes", 20 * 10**9),
        (["--weights-bytes", "27.72GiB"], "weights_bytes", int(27.72 * GiB)),
        (["--cudagraph-bytes", "512MiB"], "cudagraph_bytes", 512 * 2**20),
        (["--max-model-len", "32K"], "max_model_len", 32_768),
        (["--max-model-len", "32k"], "max_model_len", 32_000),
        (["--max-num-batched-tokens", "8K"], "max_num_batched_tokens", 8_192),
        (["--max-num-seqs", "1k"], "max_num_seqs", 1_000),
        (["--max-total-tokens", "2M"], "max_total_tokens", 2 * 2**20),
        (["--tensor-parallel-size", "2"], "tp", 2),
        (["--pipeline-parallel-size", "4"], "pp", 4),
        (["--data-parallel-size", "8"], "data_parallel_size", 8),
        (["--dp", "8"], "data_parallel_size", 8),
        (["--kv-cache-dtype", "fp8"], "kv_dtype", "fp8"),
        (["--gpu-bandwidth", "3350"], "gpu_bandwidth_gb_s", 3350.0),
        (["--gpu-memory-utilization", "0.8"], "gpu_memory_utilization", 0.8),
        (["--engine", "sglang"], "engine", "sglang"),
        (["--mamba-cache-mode", "align"], "mamba_cache_mode", "align"),
        (["--dtype", "half"], "dtype", "half"),
        (["--llm-class"], "api_server", False),
        (["--enforce-eager"], "enforce_eager", True),
        (["--disable-hybrid-kv-cache-manager"], "disable_hybrid_kv_cache_manager", True),
        (["--async-scheduling"], "async_scheduling", True),
        (["--no-async-scheduling"], "async_scheduling", False),
        (["--max-model-len", "auto"], "auto_fit_max_model_len", True),
        (["--max-model-len", "-1"], "auto_fit_max_model_len", True),
    ],
)
def test_flags_round_trip_into_the_request(args: list[str], field: str, expected: object) -> None:
    request = _request(args)
    assert getattr(request, field) == expected
    if args[-1] in ("auto", "-1"):
        assert request.max_model_len is None  # the word switches auto-fit on, sets no length


def test_flags_not_given_set_nothing() -> None:
    """A plan file's values and the model's defaults stay where no flag is given."""
    assert _fields(PlanRequest, []) == {}
    request = _request([])
    assert (request.tp, request.api_server, request.async_scheduling) == (1, True, None)


def test_every_request_field_is_a_plan_flag_but_the_two_set_otherwise() -> None:
    dests = {p.name for p in plan.params if isinstance(p, click.Option)}
    missing = [name for name in PlanRequest.model_fields if name not in dests]
    # auto_fit_max_model_len: --max-model-len auto; allow_long_max_model_len: the environment
    assert missing == ["auto_fit_max_model_len", "allow_long_max_model_len"]


def test_shared_engine_inputs_keep_the_vocabulary_definition() -> None:
    """plan's --pp/--kv-dtype/... are the same declaration sim's engine inputs use."""
    from kvbudget.cli.main import cli

    sim = cli.get_command(click.Context(cli), "sim")
    assert sim is not None
    for flag in ("--pp", "--kv-dtype", "--engine-version", "--quantization"):
        mine, theirs = _option(plan, flag), _option(sim, flag)
        assert (mine.opts, mine.help) == (theirs.opts, theirs.help), flag
    asynch = _option(plan, "--async-scheduling")
    assert asynch.secondary_opts == ["--no-async-scheduling"]
    assert asynch.help is not None
    assert asynch.help.startswith(_option(sim, "--async-scheduling").help or "?")
    assert "In plan:" in asynch.help  # plan's own words after the shared ones


class _Future(PlanRequest):
    """A request with fields PlanRequest does not have yet (nothing else is edited)."""

    prefill_chunk_tokens: int | None = Field(
        default=None, ge=1, description="Tokens per prefill chunk."
    )
    cpu_offload_bytes: int | None = Field(
        default=None,
        ge=0,
        description="CPU offload space per GPU.",
        json_schema_extra={"cli": {"flags": ["--cpu-offload", "--cpu-offload-gb"]}},
    )
    attention_backend: str = Field(
        default="auto",
        description="Attention backend.",
        json_schema_extra={"cli": {"choices": ["auto", "flash", "flashinfer"]}},
    )
    chunked_prefill: bool | None = Field(default=None, description="Chunked prefill on or off.")


def test_a_new_field_is_a_flag_with_no_edit_to_the_command() -> None:
    result = CliRunner().invoke(_command(_Future), ["--help"], terminal_width=200)
    assert result.exit_code == 0
    for text in (
        "--prefill-chunk-tokens N",
        "Tokens per prefill chunk.",
        "--cpu-offload, --cpu-offload-gb SIZE",
        "--attention-backend [auto|flash|flashinfer]",
        "--chunked-prefill / --no-chunked-prefill",
        "--kv-cache-memory, --kv-cache-memory-bytes SIZE",  # PlanRequest's own stay
    ):
        assert text in result.output, text
    fields = _fields(
        _Future,
        [
            *("--prefill-chunk-tokens", "2K", "--cpu-offload-gb", "4G", "--tp", "2"),
            *("--attention-backend", "flash", "--no-chunked-prefill"),
        ],
    )
    request = _Future(model="meta-llama/Llama-3.1-8B", **fields)
    assert request.prefill_chunk_tokens == 2_048
    assert request.cpu_offload_bytes == 4 * GiB
    assert (request.attention_backend, request.chunked_prefill, request.tp) == ("flash", False, 2)


class _VllmNamed(BaseModel):
    tensor_parallel_size: int = Field(default=1, ge=1, description="vLLM's name for --tp.")
    cache_dtype: str = Field(
        default="auto",
        description="vLLM's other name for --kv-dtype.",
        json_schema_extra={"cli": {"flags": ["--kv-cache-dtype"]}},
    )


def test_a_field_named_as_vllm_names_it_takes_the_canonical_flag() -> None:
    """One flag per concept: a field spelled ``tensor_parallel_size`` is still ``--tp``, and one
    whose flag is a shared input's alias gets that input's whole declaration."""
    command = _command(_VllmNamed)
    assert _option(command, "--tensor-parallel-size").opts == ["--tp", "--tensor-parallel-size"]
    assert _option(command, "--kv-cache-dtype").opts == ["--kv-dtype", "--kv-cache-dtype"]
    assert _fields(_VllmNamed, ["--tp", "2k", "--kv-cache-dtype", "fp8"]) == {
        "tensor_parallel_size": 2_000,
        "cache_dtype": "fp8",
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"json_schema_extra": {"cli": {"flag": ["--x"]}}, "description": "X."}, "unknown CLI"),
        ({}, "give the field a description"),
        # a second name for a shared input is refused, not a second flag for the concept
        ({"json_schema_extra": {"cli": {"flags": ["--cache-dtype", "--kv-dtype"]}}}, "mixes"),
    ],
)
def test_bad_metadata_is_refused_when_the_command_is_built(
    extra: dict[str, Any], message: str
) -> None:
    class Bad(BaseModel):
        knob: int = Field(default=1, **extra)

    with pytest.raises(TypeError, match=message):
        model_options(Bad)


def test_a_size_or_count_that_cannot_be_read_names_the_flag() -> None:
    with pytest.raises(ConfigError) as info:
        _fields(PlanRequest, ["--kv-cache-memory", "lots"])
    assert str(info.value).startswith("--kv-cache-memory: cannot read 'lots' as a size")
    with pytest.raises(ConfigError) as info:
        _fields(PlanRequest, ["--max-num-seqs", "1.5K"])  # vLLM refuses a decimal binary count
    assert str(info.value).startswith("--max-num-seqs:")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", {"allow_long_max_model_len": True}),
        ("TRUE", {"allow_long_max_model_len": True}),
        ("0", {}),
        ("yes", {}),
    ],
)
def test_the_environment_sets_a_field_as_vllm_reads_it(
    value: str, expected: dict[str, bool]
) -> None:
    # vLLM 0.32.0 envs.py: VLLM_ALLOW_LONG_MAX_MODEL_LEN is on for "1" or "true" (any case)
    assert fields_from_env(PlanRequest, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": value}) == expected
    assert fields_from_env(PlanRequest, {}) == {}


def test_plan_file_values_are_read_as_the_flags_read_them() -> None:
    assert parse_file_value(PlanRequest, "gpu_memory_bytes", "80GiB") == 80 * GiB
    assert parse_file_value(PlanRequest, "kv_cache_memory_bytes", "20G") == 20 * GiB
    assert parse_file_value(PlanRequest, "max_model_len", "32K") == 32_768
    assert parse_file_value(PlanRequest, "tp", 2) == 2
    assert parse_file_value(PlanRequest, "kv_dtype", "fp8") == "fp8"
    assert parse_file_value(PlanRequest, "no_such_key", "1K") == "1K"  # refused by the model


def test_plan_end_to_end_with_aliases_and_suffixes() -> None:
    result = CliRunner().invoke(
        plan,
        [
            *("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"),
            *("--kv-cache-memory-bytes", "10G", "--tensor-parallel-size", "2"),
            *("--max-model-len", "32K", "--json", "--no-scenarios"),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # Llama-3.1-8B at TP 2: 4 of 8 KV heads x 128 x 2 B x K,V x 16 tokens = 32,768 B a page;
    # 10 GiB // 32,768 // 32 layers = 10,240 blocks
    assert (doc["tp"], doc["max_model_len"], doc["num_blocks"]) == (2, 32_768, 10_240)


@pytest.mark.parametrize(
    ("flag", "choices"),
    [
        # docs/commands/plan.md's flag table
        ("--engine", ["vllm", "sglang"]),
        ("--mamba-cache-mode", ["none", "align", "all"]),
        ("--dtype", ["auto", "half", "float16", "bfloat16", "float", "float32"]),
    ],
)
def test_choices_come_from_the_field_type_or_its_metadata(flag: str, choices: list[str]) -> None:
    kind = _option(plan, flag).type
    kind = getattr(kind, "inner", kind)  # kvbudget.cli.guards may wrap it
    assert isinstance(kind, click.Choice)
    assert list(kind.choices) == choices
