"""``kvbudget bench``'s workload options: the prompts, prefixes, sessions, trace and dataset
(``RunConfig.workload``, built by :mod:`kvbudget.load.workloads`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from kvbudget.cli.vocab import COUNT, COUNT0, RANDOM_RANGE_RATIO
from kvbudget.errors import ConfigError

_Command = TypeVar("_Command", bound=Callable[..., Any])

#: bench's workload options (RunConfig.workload, kvbudget.load.workloads)
WORKLOAD_KEYS = (
    "prefix_groups",
    "shared_prefix_tokens",
    "random_prefix_len",
    "random_range_ratio",
    "num_turns",
    "turn_interval_s",
    "trace_path",
    "trace_speedup",
    "trace_block_size",
    "dataset_name",
    "dataset_path",
    "sharegpt_output_len",
    "custom_output_len",
    "disable_shuffle",
)

#: the options of :data:`WORKLOAD_KEYS`, in ``--help`` order
_WORKLOAD_OPTIONS = (
    click.option(
        "--prefix-groups",
        type=COUNT0,
        default=0,
        help="sim's shared-prefix groups (Zipf popularity), each of --shared-prefix-tokens; "
        "0 = one system prompt of --shared-prefix-tokens [default: 0].",
    ),
    click.option(
        "--shared-prefix-tokens",
        type=COUNT0,
        default=0,
        help="sim's shared prefix (per group, or the system prompt), inside --input-tokens "
        "[default: 0].",
    ),
    click.option(
        "--random-prefix-len",
        type=COUNT0,
        default=0,
        help="vllm bench serve's random dataset prefix: this many tokens shared by every prompt, "
        "added before --input-tokens [default: 0].",
    ),
    click.option(
        RANDOM_RANGE_RATIO,
        "random_range_ratio",
        default=None,
        help="vllm bench serve's random dataset: each request's input and output length drawn "
        "uniformly within this ratio of --input-tokens / --output-tokens (0.1 = +-10 %; or "
        '\'{"input": 0.3, "output": 0.5}\') [default: 0.0, fixed].',
    ),
    click.option(
        "--num-turns",
        type=COUNT,
        default=1,
        show_default=True,
        help="Multi-turn sessions of this many turns: a turn is sent once the previous one "
        "finished, its prompt the previous prompt, the server's answer and a new user message of "
        "--input-tokens (sim: workload.sessions.num_turns); --num-requests counts turns.",
    ),
    click.option(
        "--turn-interval",
        "turn_interval_s",
        type=click.FloatRange(0),
        default=0.0,
        show_default=True,
        help="Seconds between a session's planned turns (the earliest a turn is sent).",
    ),
    click.option(
        "--trace",
        "trace_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="Replay this JSONL trace at its timestamps (sim's trace format: kvbudget's export or "
        "Mooncake's; docs/workloads.md); instead of --rate/--concurrency.",
    ),
    click.option(
        "--trace-speedup",
        type=click.FloatRange(min=0, min_open=True),
        default=1.0,
        show_default=True,
        help="Divide the trace's timestamps by this.",
    ),
    click.option(
        "--trace-block-size",
        type=COUNT,
        default=512,
        show_default=True,
        help="Tokens per hash id for trace lines without block_size (Mooncake: 512).",
    ),
    click.option(
        "--dataset-name",
        type=click.Choice(["random", "sharegpt", "custom"]),
        default="random",
        show_default=True,
        help="vllm bench serve's datasets: random (synthetic prompts of --input-tokens), sharegpt "
        '(conversations JSON/JSONL, first turn sent) or custom (JSONL of {"prompt": ...} or '
        '{"prompt_token_ids": [...]}); counted with the served tokenizer.',
    ),
    click.option(
        "--dataset-path",
        type=click.Path(dir_okay=False),
        default=None,
        help="The dataset file of --dataset-name sharegpt/custom (prompts kept private: hashes only "
        "unless --keep-prompts).",
    ),
    click.option(
        "--sharegpt-output-len",
        type=COUNT,
        default=None,
        help="sharegpt: output tokens of every request [default: the second turn's length].",
    ),
    click.option(
        "--custom-output-len",
        type=COUNT,
        default=None,
        help="custom: output tokens of lines without output_tokens [default: --output-tokens].",
    ),
    click.option(
        "--disable-shuffle",
        is_flag=True,
        help="Send the dataset in file order (default: shuffled with --seed, as vllm bench serve).",
    ),
)


def workload_options(command: _Command) -> _Command:
    """Add the workload options to ``command`` (after its other options in ``--help``)."""
    for option in reversed(_WORKLOAD_OPTIONS):
        command = option(command)
    return command


def trace_shape(opts: dict[str, Any], ctx: click.Context) -> None:
    """``--trace``: the trace's timestamps are the schedule (shape ``planned``)."""
    for key, flag in (
        ("shape", "--arrival"),
        ("rate_per_s", "--rate"),
        ("concurrency", "--concurrency"),
        ("ramp_stages", "--ramp"),
    ):
        source = ctx.get_parameter_source("ramp" if key == "ramp_stages" else key)
        if source is not None and source is not click.core.ParameterSource.DEFAULT:
            raise ConfigError(
                f"--trace: each request is sent at its timestamp in the trace; drop {flag}",
                field="trace",
            )
    opts["shape"] = "planned"
