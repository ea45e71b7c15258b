"""One flag vocabulary for every command (the table is docs/flags.md).

Each concept has one canonical flag name in every command that takes it, and the same
concept's name in ``vllm bench serve`` / ``vllm serve`` is accepted as an alias
(``--num-prompts``, ``--random-input-len``, ``--random-output-len``, ``--request-rate``,
``--max-concurrency``, ``--endpoint /v1/completions``, ``--tensor-parallel-size`` ...). Older
kvbudget spellings stay accepted as deprecated aliases. ``tests/unit/test_cli_vocab.py`` checks
the table against the real click commands.

Counts take vLLM's size suffixes (``1k`` = 1,000, ``1K`` = 1,024; :func:`kvbudget.units.parse_count`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from kvbudget.errors import ConfigError
from kvbudget.units import parse_bytes, parse_count

_F = TypeVar("_F", bound=Callable[..., Any])

#: canonical flag -> aliases (vLLM's names first, then deprecated kvbudget spellings)
NUM_REQUESTS = ("--num-requests", "--num-prompts")
INPUT_TOKENS = ("--input-tokens", "--random-input-len", "--input-len")
OUTPUT_TOKENS = ("--output-tokens", "--random-output-len", "--output-len")
RATE = ("--rate", "--request-rate")
TP = ("--tp", "--tensor-parallel-size")
PP = ("--pp", "--pipeline-parallel-size")
DP = ("--dp", "--data-parallel-size")
KV_DTYPE = ("--kv-dtype", "--kv-cache-dtype")
#: vLLM bench serve's name and format ("50,90,95,99"); kvbudget's default differs (see
#: kvbudget.metrics.percentile_set: vLLM's is "99")
METRIC_PERCENTILES = "--metric-percentiles"
METRIC_PERCENTILES_HELP = (
    "Percentiles of TTFT, TPOT, ITL and E2E to report, comma-separated (vllm bench serve's "
    'flag; its default is "99") [default: 50,90,95,99]; the mean and median are always given.'
)
#: vllm bench serve's random dataset length spread (kvbudget.workload.range_ratio)
RANDOM_RANGE_RATIO = "--random-range-ratio"
#: the engine inputs ``plan``, ``sim`` and ``serve --gpu`` share: one flag name and one help each
ENGINE_VERSION_HELP = (
    "Engine version whose arithmetic and log format to use (vLLM default 0.32.0, the build "
    "kvbudget runs; 0.33.0 is modelled from its source; SGLang 0.5.4)."
)
QUANTIZATION_HELP = (
    "vLLM --quantization method of the weights (fp8, awq, gptq, ...); the KV dtype stays "
    "--kv-dtype. Default: the config's quantization_config (or its hf_quant_config.json), else "
    "none."
)
KV_DTYPE_HELP = (
    "KV cache dtype: auto, bfloat16, fp8, fp8_ds_mla, ... (default auto: the model dtype, or "
    "the dtype a ModelOpt checkpoint's kv_cache_quant_algo names, as vLLM >= 0.14 and SGLang "
    "resolve it; SGLang 0.5.23 also takes the FP8 KV of compressed-tensors and fp8 configs)."
)
PP_HELP = "Pipeline-parallel size (default 1)."
DP_HELP = (
    "vLLM --data-parallel-size: engines of tp x pp GPUs, each with its own KV pool; a MoE "
    "model's experts span all dp x tp GPUs (default 1)."
)
EXPERT_PARALLEL = "--enable-expert-parallel/--no-enable-expert-parallel"
EXPERT_PARALLEL_HELP = (
    "vLLM --enable-expert-parallel: MoE experts placed whole on the ranks instead of split by "
    "tensor parallelism (default off)."
)
#: vLLM's own spelling (``vllm serve``: ``argparse.BooleanOptionalAction`` on
#: ``SchedulerConfig.async_scheduling: bool | None = None``, vLLM 0.32.0
#: ``vllm/engine/arg_utils.py``); not given: the version's default
ASYNC_SCHEDULING = "--async-scheduling/--no-async-scheduling"
ASYNC_SCHEDULING_HELP = (
    "vLLM --async-scheduling / --no-async-scheduling: schedule step k+1 while step k runs (a "
    "request reaching a busy engine waits one more step). Default: the --engine-version's "
    "(off up to 0.13.0, on from 0.14.0; with --pp > 1 from 0.32.0)."
)
PREFIX_CACHING = "--prefix-caching/--no-prefix-caching"
PREFIX_CACHING_VLLM = "--enable-prefix-caching/--no-enable-prefix-caching"


@dataclass(frozen=True, slots=True)
class SharedFlag:
    """One engine input's flag as every command that takes it spells it: ``decls`` are click's
    declarations (the canonical name, or ``--x/--no-x``, then vLLM's and older aliases);
    ``help`` is ``None`` where each command words its own."""

    decls: tuple[str, ...]
    help: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for decl in self.decls for name in decl.split("/"))


#: the engine inputs whose one definition every command uses (``plan``'s options generated from
#: its request model look a field's flag up here, :mod:`kvbudget.cli.model_options`)
SHARED_FLAGS: tuple[SharedFlag, ...] = (
    SharedFlag(TP),
    SharedFlag(PP, PP_HELP),
    SharedFlag(DP, DP_HELP),
    SharedFlag(KV_DTYPE, KV_DTYPE_HELP),
    SharedFlag(("--engine-version",), ENGINE_VERSION_HELP),
    SharedFlag(("--quantization",), QUANTIZATION_HELP),
    SharedFlag((EXPERT_PARALLEL,), EXPERT_PARALLEL_HELP),
    SharedFlag((ASYNC_SCHEDULING,), ASYNC_SCHEDULING_HELP),
)


def shared_flag(name: str) -> SharedFlag | None:
    """The shared engine input that ``name`` (a canonical name or an alias) spells, if any."""
    return next((flag for flag in SHARED_FLAGS if name in flag.names), None)


def _shared_option(name: str, dest: str, **attrs: Any) -> Callable[[_F], _F]:
    flag = shared_flag(name)
    assert flag is not None and flag.help is not None, name
    return click.option(*flag.decls, dest, help=flag.help, **attrs)


if TYPE_CHECKING:  # click >= 8.2 types ParamType by its value; 8.1 is not subscriptable
    _IntType = click.ParamType[int, Any]
    _StrType = click.ParamType[str, Any]
else:
    _IntType = _StrType = click.ParamType


class Count(_IntType):
    """A whole count with vLLM's size suffixes (``32k`` = 32,000, ``32K`` = 32,768)."""

    name = "count"

    def __init__(self, minimum: int = 1, maximum: int | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            text: str | int = value
        else:
            text = str(value)
        flag = param.opts[0] if param is not None and param.opts else "count"
        # a ConfigError (not click's BadParameter): the same one line as every other bad input
        if self.maximum is None:
            return parse_count(text, field=flag, minimum=self.minimum)
        return parse_count(text, field=flag, minimum=self.minimum, maximum=self.maximum)


class ByteSize(_IntType):
    """A byte size as vLLM's ``--kv-cache-memory-bytes`` reads it: ``80G`` is 80 GiB, ``80g``
    80 x 10^9; ``80GiB`` and ``80GB`` in any case (:func:`kvbudget.units.parse_bytes`)."""

    name = "size"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        flag = param.opts[0] if param is not None and param.opts else "size"
        return parse_bytes(value if isinstance(value, int) else str(value), field=flag)


#: ``--endpoint`` values: kvbudget's short names and vLLM bench serve's paths
ENDPOINT_VALUES: dict[str, str] = {
    "completions": "completions",
    "chat": "chat",
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
}


class Endpoint(_StrType):
    """``completions`` / ``chat``, or vLLM bench serve's ``/v1/completions`` paths."""

    name = "endpoint"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[completions|chat|/v1/completions|/v1/chat/completions]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        key = str(value).strip()
        if key.endswith("/") and len(key) > 1:
            key = key.rstrip("/")
        if key in ENDPOINT_VALUES:
            return ENDPOINT_VALUES[key]
        flag = param.opts[0] if param is not None and param.opts else "--endpoint"
        raise ConfigError(
            f"{flag} {value!r}: not an endpoint; give completions, chat, /v1/completions or "
            "/v1/chat/completions",
            field="endpoint",
        )


if TYPE_CHECKING:
    _StrChoice = click.Choice[str]
else:
    _StrChoice = click.Choice


class RegisteredChoice(_StrChoice):
    """A choice of registered names (``--engine``), read when a command line is parsed or its
    --help shown, so an engine registered after the command was declared is a choice too; the
    help and the refusal of another value are click's, as for a fixed ``click.Choice``."""

    def __init__(self, names: Callable[[], tuple[str, ...]]) -> None:
        self._names = names
        super().__init__((), case_sensitive=True)

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        return self._names()

    @choices.setter
    def choices(self, value: tuple[str, ...]) -> None:
        """click's ``__init__`` sets the choices; the register keeps them."""


COUNT = Count()
COUNT0 = Count(minimum=0)
SIZE = ByteSize()
ENDPOINT = Endpoint()


def engine_input_options(*, kv_dtype: bool = True) -> Callable[[_F], _F]:
    """``--pp``, ``--engine-version``, ``--quantization``, ``--kv-dtype`` (unless the command
    has its own), ``--enable-expert-parallel`` and ``--async-scheduling``, with ``plan``'s
    names and help: the engine inputs ``sim`` and ``serve --gpu`` take as ``plan`` does."""

    def apply(func: _F) -> _F:
        options = [
            _shared_option("--pp", "pp", type=COUNT),
            _shared_option("--engine-version", "engine_version"),
            _shared_option("--quantization", "quantization"),
            _shared_option("--enable-expert-parallel", "enable_expert_parallel", default=None),
            _shared_option("--async-scheduling", "async_scheduling", default=None),
        ]
        if kv_dtype:
            options.append(_shared_option("--kv-dtype", "kv_dtype"))
        for option in reversed(options):
            func = option(func)
        return func

    return apply
