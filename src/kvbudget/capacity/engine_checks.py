"""vLLM's own start-up checks on the settings ``kvbudget plan`` accepts, in vLLM's words.

A plan (and ``kvbudget deploy``, which plans through :func:`~kvbudget.capacity.planner.make_plan`)
must never print a deployment the engine refuses to start. Each rule below is the engine's
check, with its message, for the values the engine will actually use (kvbudget's resolved
defaults included: ``--max-num-seqs 10000`` with the default ``max_num_batched_tokens`` 8192 is
refused by vLLM too). Sources, vLLM 0.32.0 (the installed CPU build:
``site-packages/vllm/...``):

* ``vllm/config/scheduler.py`` ``SchedulerConfig.verify_max_model_len`` (called from
  ``__post_init__``): ``max_num_batched_tokens >= max_num_seqs`` always; and
  ``max_num_batched_tokens >= max_model_len`` when chunked prefill is off. In vLLM V1
  ``enable_chunked_prefill`` defaults to True (same file) and kvbudget plan has no flag to turn
  it off, so the planner passes True; the rule is kept for callers that plan without it. The
  same two checks, same words, are in ``SchedulerConfig._verify_args`` of the older releases
  (``vllm/config.py``; the first since chunked prefill exists, the second at least since 0.8).
  ``max_num_batched_tokens > max_num_seqs x max_model_len`` is only a warning there, so not here.
* ``vllm/config/scheduler.py``: ``max_num_batched_tokens`` and ``max_num_seqs`` are
  ``Field(ge=1)``; ``vllm/config/cache.py`` ``CacheConfig.gpu_memory_utilization`` is
  ``Field(gt=0, le=1)`` and ``block_size`` ``Field(gt=0)`` (pydantic's words:
  ``Input should be greater than 0`` ...); the block sizes older releases take are
  :func:`kvbudget.capacity.versions.check_vllm_block_size`'s table.

Each refusal is one :class:`~kvbudget.errors.ConfigError` line: the field, vLLM's message in
quotes, and the fix. SGLang plans are not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.versions import Version, check_vllm_block_size, format_version
from kvbudget.errors import ConfigError


@dataclass(frozen=True, slots=True)
class VllmStartSettings:
    """The values a vLLM engine would start with (given or kvbudget's resolved defaults)."""

    version: Version
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    enable_chunked_prefill: bool = True


def _refuse(field: str, version: Version, engine_words: str, fix: str) -> ConfigError:
    return ConfigError(
        f"{field}: vLLM {format_version(version)} refuses to start with this: "
        f'"{engine_words}"; {fix}',
        field=field,
    )


def check_vllm_start(settings: VllmStartSettings) -> None:
    """Refuse settings vLLM's own configuration checks refuse at start-up (see the module)."""
    s = settings
    for field, value in (
        ("max_num_batched_tokens", s.max_num_batched_tokens),
        ("max_num_seqs", s.max_num_seqs),
        ("max_model_len", s.max_model_len),
    ):
        if value < 1:
            raise _refuse(
                field, s.version, "Input should be greater than or equal to 1", "give >= 1"
            )
    util = s.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        words = (
            "Input should be greater than 0"
            if util <= 0
            else "Input should be less than or equal to 1"
        )
        raise _refuse(
            "gpu_memory_utilization", s.version, words, "give a fraction in (0, 1], e.g. 0.9"
        )
    if s.block_size is not None:
        if s.block_size < 1:
            raise _refuse("block_size", s.version, "Input should be greater than 0", "give >= 1")
        check_vllm_block_size(s.block_size, s.version)
    if s.max_num_batched_tokens < s.max_model_len and not s.enable_chunked_prefill:
        raise _refuse(
            "max_num_batched_tokens",
            s.version,
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) is smaller than max_model_len "
            f"({s.max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len.",
            f"give --max-num-batched-tokens >= {s.max_model_len} or a smaller --max-model-len",
        )
    if s.max_num_batched_tokens < s.max_num_seqs:
        raise _refuse(
            "max_num_batched_tokens",
            s.version,
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) must be greater than or equal "
            f"to max_num_seqs ({s.max_num_seqs}).",
            f"give --max-num-batched-tokens >= {s.max_num_seqs} or --max-num-seqs <= "
            f"{s.max_num_batched_tokens}",
        )
