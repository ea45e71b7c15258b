"""``bench``'s planned workloads: what ``sim`` simulates, sent to a real endpoint.

Three sources, each planned before the clock starts:

* **synthetic structure** (sim's workload generator, :func:`kvbudget.workload.spec.generate`):
  shared prefixes (``--prefix-groups`` / ``--shared-prefix-tokens``, sim's names, inside
  ``--input-tokens``; vLLM's ``--random-prefix-len``, added to it as vLLM adds it),
  ``--random-range-ratio`` lengths, and multi-turn sessions (``--num-turns``). The same
  :class:`~kvbudget.workload.spec.WorkloadSpec` sim reads, with the same seed, gives the same
  prompt ids, so sim and bench see one workload;
* **a trace** (``--trace``): sim's trace reader (:mod:`kvbudget.workload.traces`, kvbudget's
  JSONL and Mooncake's), replayed at its timestamps divided by ``--trace-speedup``;
* **a dataset** (``--dataset-name sharegpt|custom --dataset-path``), read as ``vllm bench
  serve`` reads it (:mod:`kvbudget.load.datasets`).

Multi-turn sessions against a live server (:mod:`kvbudget.load.runner`,
:mod:`kvbudget.load.session_turns`): turn ``k > 0`` is sent
only after turn ``k - 1`` finished, and its prompt is turn ``k - 1``'s prompt, the answer the
server actually gave, then the new user message (the chat endpoint sends them as messages).
The planned request of a later turn therefore carries only its new user message here.

Prompt text is never stored unless ``--keep-prompts`` (records keep its sha256).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.errors import ConfigError
from kvbudget.load.config import RunConfig
from kvbudget.load.requests import arrival_offsets
from kvbudget.workload.request import PlannedRequest


def check_workload(cfg: RunConfig) -> None:
    """Refuse combinations that mean nothing, in one line, before anything is sent."""
    w = cfg.workload
    if w.prefix_groups and not w.shared_prefix_tokens:
        raise ConfigError(
            f"--prefix-groups {w.prefix_groups}: give --shared-prefix-tokens too (tokens of each "
            "group's shared prefix, e.g. 2048)",
            field="prefix_groups",
        )
    if w.random_prefix_len and w.shared_prefix_tokens:
        raise ConfigError(
            f"--random-prefix-len {w.random_prefix_len} and --shared-prefix-tokens "
            f"{w.shared_prefix_tokens}: both are a shared prefix (vLLM's added to --input-tokens, "
            "sim's inside it); give one",
            field="random_prefix_len",
        )
    if w.shared_prefix_tokens and w.shared_prefix_tokens >= cfg.prompt_tokens:
        raise ConfigError(
            f"--shared-prefix-tokens {w.shared_prefix_tokens}: the shared prefix is part of "
            f"--input-tokens {cfg.prompt_tokens}; give fewer tokens or a longer --input-tokens",
            field="shared_prefix_tokens",
        )
    sources = [
        name
        for name, on in (
            ("--trace", w.trace_path is not None),
            (f"--dataset-name {w.dataset_name}", w.dataset),
        )
        if on
    ]
    if len(sources) > 1:
        raise ConfigError(
            f"{' and '.join(sources)}: one source of requests; give one", field="trace"
        )
    if w.dataset and w.dataset_path is None:
        raise ConfigError(
            f"--dataset-name {w.dataset_name}: give --dataset-path FILE (the prompts)",
            field="dataset_path",
        )
    if not w.dataset and w.dataset_path is not None:
        raise ConfigError(
            f"--dataset-path {w.dataset_path}: give --dataset-name sharegpt or custom (how to "
            "read it)",
            field="dataset_path",
        )
    structure = (
        w.prefix_groups
        or w.shared_prefix_tokens
        or w.random_prefix_len
        or w.random_range_ratio is not None
        or w.multi_turn
    )
    if sources and structure:
        raise ConfigError(
            f"{sources[0]}: the prompts come from it; drop --prefix-groups, "
            "--shared-prefix-tokens, --random-prefix-len, --random-range-ratio and --num-turns",
            field="trace" if w.trace_path else "dataset_name",
        )
    if w.trace_path is not None and cfg.shape != "planned":
        raise ConfigError(
            "--trace: each request is sent at its timestamp in the trace; drop --rate, "
            "--arrival, --ramp and --concurrency",
            field="trace",
        )
    if (
        cfg.workload.planned
        and not (w.trace_path or w.dataset)
        and cfg.num_requests is None
        and not (cfg.open_loop and cfg.duration_s is not None)
    ):
        raise ConfigError(
            "this workload is planned before the run: give --num-requests (a closed loop cannot "
            "plan from --duration alone)",
            field="num_requests",
        )
    if w.random_range_ratio is not None:
        from kvbudget.workload.range_ratio import parse_range_ratio

        parse_range_ratio(w.random_range_ratio)  # a bad ratio: one line, before anything is sent
    for flag, path in (("--trace", w.trace_path), ("--dataset-path", w.dataset_path)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(
                f"{flag} {path}: no such file; give the path of the file",
                field=flag.removeprefix("--").replace("-", "_"),
            )
    if w.sharegpt_output_len is not None and w.dataset_name != "sharegpt":
        raise ConfigError(
            "--sharegpt-output-len: only with --dataset-name sharegpt", field="sharegpt_output_len"
        )
    if w.custom_output_len is not None and w.dataset_name != "custom":
        raise ConfigError(
            "--custom-output-len: only with --dataset-name custom", field="custom_output_len"
        )


def _length(mean_tokens: int, ratio: float, minimum: int) -> dict[str, Any]:
    from kvbudget.workload.range_ratio import ranged_length

    return ranged_length(mean_tokens, ratio, minimum=minimum)


def synthetic_spec(cfg: RunConfig, num_requests: int) -> Any:
    """The :class:`WorkloadSpec` of the synthetic options (``sim --scenario``'s ``workload:``)."""
    from kvbudget.workload.range_ratio import parse_range_ratio
    from kvbudget.workload.spec import workload_from_dict

    w = cfg.workload
    ratio_in, ratio_out = (0.0, 0.0)
    if w.random_range_ratio is not None:
        ratio_in, ratio_out = parse_range_ratio(w.random_range_ratio)
    data: dict[str, Any] = {
        "num_requests": num_requests,
        "arrivals": {"kind": "closed", "concurrency": 1},
        "input_tokens": _length(cfg.prompt_tokens, ratio_in, 0),
        "output_tokens": _length(cfg.output_tokens, ratio_out, 1),
        "vocab_size": cfg.vocab_size,
    }
    if w.random_prefix_len:
        # vLLM's prefix comes on top of the input length: the input is the unique part
        data["prefix"] = {"system_prompt_tokens": w.random_prefix_len}
        data["input_tokens_include_prefix"] = False
    elif w.prefix_groups:
        data["prefix"] = {
            "num_groups": w.prefix_groups,
            "group_prefix_tokens": w.shared_prefix_tokens,
        }
    elif w.shared_prefix_tokens:
        data["prefix"] = {"system_prompt_tokens": w.shared_prefix_tokens}
    if w.multi_turn:
        data["sessions"] = {"num_turns": w.num_turns, "turn_interval_s": w.turn_interval_s}
    if cfg.cancel_after_tokens is not None:
        data["cancel_fraction"] = cfg.cancel_fraction
        data["cancel_after_tokens"] = cfg.cancel_after_tokens
    return workload_from_dict(data)


def _session_index(req: PlannedRequest, fallback: int) -> int:
    return int(req.session_id[1:]) if req.session_id else fallback


def plan_synthetic(cfg: RunConfig) -> list[PlannedRequest]:
    """Requests of the synthetic options, in send order (sessions: a session's turns together,
    each later turn carrying only its new user message), with open-loop arrival times."""
    from kvbudget.workload.spec import generate

    turns = cfg.workload.num_turns
    offsets = arrival_offsets(cfg) if cfg.open_loop else None
    if cfg.num_requests is not None:
        total = cfg.num_requests
        if offsets is not None:
            total = min(total, len(offsets) * turns)
    else:
        assert offsets is not None  # check_workload: a closed loop has num_requests
        total = len(offsets) * turns
    if total == 0:
        return []
    reqs = generate(synthetic_spec(cfg, total), np.random.default_rng(cfg.seed))
    if turns > 1:
        reqs = _user_parts(sorted(reqs, key=lambda r: (r.session_id or "", r.turn_index)))
    interval = cfg.workload.turn_interval_s
    out = []
    for i, req in enumerate(reqs):
        arrival = 0.0
        if offsets is not None:
            arrival = float(offsets[_session_index(req, i)]) + req.turn_index * interval
        out.append(replace(req, arrival_s=arrival, cache_salt=cfg.cache_salt or req.cache_salt))
    if offsets is not None:
        out.sort(key=lambda r: (r.arrival_s, r.turn_index))
    return out


def _user_parts(reqs: Sequence[PlannedRequest]) -> list[PlannedRequest]:
    """Later turns cut to their new user message (the history is what the server answered)."""
    out: list[PlannedRequest] = []
    prev: PlannedRequest | None = None
    for req in reqs:
        if req.turn_index > 0 and prev is not None and prev.session_id == req.session_id:
            # sim's turn k: turn k-1's prompt, its (synthetic) output, then the user message
            start = len(prev.prompt_token_ids) + prev.output_tokens
            user = tuple(req.prompt_token_ids[start:])
            prev = req
            req = replace(req, prompt_token_ids=user, shared_prefix_tokens=0)
        else:
            prev = req
        out.append(req)
    return out


def plan_trace(cfg: RunConfig) -> list[PlannedRequest]:
    """The trace's requests at their (sped-up) timestamps, sim's reader and regeneration."""
    from kvbudget.workload.spec import generate, workload_from_dict

    w = cfg.workload
    spec = workload_from_dict(
        {
            "trace": {
                "path": w.trace_path,
                "speedup": w.trace_speedup,
                "block_size": w.trace_block_size,
            },
            "num_requests": cfg.num_requests,
            "duration_s": cfg.duration_s,
            "vocab_size": cfg.vocab_size,
        }
    )
    reqs = generate(spec, np.random.default_rng(cfg.seed))
    if cfg.cache_salt is not None:
        reqs = [replace(r, cache_salt=cfg.cache_salt) for r in reqs]
    return reqs


def session_key(req: PlannedRequest) -> str:
    """What keeps a request on one worker: its session (every turn together), else itself."""
    return req.session_id or req.request_id
