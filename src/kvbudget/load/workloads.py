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
  serve`` reads it (vLLM ``vllm/benchmarks/datasets/sharegpt.py`` ``ShareGPTDataset`` and
  ``custom.py`` ``CustomDataset``): shuffled with ``random.seed(seed); random.shuffle`` unless
  ``--disable-shuffle``; ShareGPT keeps entries with two or more turns, sends the first turn
  and takes the output length from the second turn in the served tokenizer (or
  ``--sharegpt-output-len``), and drops pairs ``is_valid_sequence`` refuses (prompt < 4 or
  > 1024 tokens, output < 4 unless the length is given, prompt + output > 2048). A custom
  JSONL line is ``{"prompt": "..."}`` or ``{"prompt_token_ids": [...]}`` (ids of the served
  tokenizer, decoded with it), with an optional ``"output_tokens"``; its output length is that,
  else ``--custom-output-len``, else ``--output-tokens``.

Multi-turn sessions against a live server (:mod:`kvbudget.load.runner`): turn ``k > 0`` is sent
only after turn ``k - 1`` finished, and its prompt is turn ``k - 1``'s prompt, the answer the
server actually gave, then the new user message (the chat endpoint sends them as messages).
The planned request of a later turn therefore carries only its new user message here.

Prompt text is never stored unless ``--keep-prompts`` (records keep its sha256).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.errors import ConfigError
from kvbudget.load.config import BenchWorkload, RunConfig
from kvbudget.load.requests import arrival_offsets
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.tokenizer import get_tokenizer

#: vLLM ``is_valid_sequence`` defaults (``vllm/benchmarks/datasets/utils.py``)
MIN_SEQ_TOKENS = 4
MAX_PROMPT_TOKENS = 1024
MAX_TOTAL_TOKENS = 2048


def is_valid_sequence(prompt_len: int, output_len: int, *, skip_min_output_len_check: bool) -> bool:
    """vLLM's filter of ShareGPT pairs (same defaults)."""
    too_short = prompt_len < MIN_SEQ_TOKENS
    output_short = not skip_min_output_len_check and output_len < MIN_SEQ_TOKENS
    too_long = prompt_len > MAX_PROMPT_TOKENS
    combined = prompt_len + output_len > MAX_TOTAL_TOKENS
    return not (too_short or output_short or too_long or combined)


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


@dataclass(frozen=True)
class DatasetPrompt:
    """One dataset entry: the prompt (text, or ids of the served tokenizer) and its output."""

    text: str | None
    token_ids: tuple[int, ...] | None
    output_tokens: int | None
    completion: str | None = None


def _dataset_bytes(path: Path, flag: str = "--dataset-path", field: str = "dataset_path") -> bytes:
    if not path.is_file():
        raise ConfigError(f"{flag} {path}: no such file", field=field)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{flag} {path}: cannot read it ({exc.strerror}); check its permissions",
            field=field,
        ) from None


def dataset_sha256(path: str, flag: str = "--dataset-path", field: str = "dataset_path") -> str:
    """The sha256 of the file's bytes (the dataset, or another input file the run reads, named
    by its ``flag`` and config ``field``; recorded when a run starts, ``--resume`` compares it)."""
    return hashlib.sha256(_dataset_bytes(Path(path), flag, field)).hexdigest()


def _read_json_entries(path: Path, expect_sha256: str | None = None) -> list[Any]:
    """A JSON list (vLLM's ShareGPT file) or JSON Lines, either way one entry per item.

    ``expect_sha256``: the hash recorded when the run started; bytes that hash otherwise (the
    file changed in between) are refused, so what is sent is what was recorded.
    """
    content = _dataset_bytes(path)
    if expect_sha256 is not None:
        now = hashlib.sha256(content).hexdigest()
        if now != expect_sha256:
            raise ConfigError(
                f"--dataset-path {path}: the file changed while the run was starting "
                f"(dataset_sha256 {expect_sha256} recorded, {now} read); leave it unchanged "
                "during the run and start again",
                field="dataset_path",
            )
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(
            f"--dataset-path {path}: not UTF-8 text; give a JSON list or JSON Lines file",
            field="dataset_path",
        ) from None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(
                f"--dataset-path {path}: not valid JSON ({exc}); give a JSON list or JSON Lines",
                field="dataset_path",
            ) from None
        return list(data)
    out = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            out.append(json.loads(raw))
        except ValueError as exc:
            raise ConfigError(
                f"--dataset-path {path}:{lineno}: not valid JSON ({exc.args[0]}); each line must "
                "be one object",
                field="dataset_path",
            ) from None
    return out


def read_dataset(w: BenchWorkload) -> list[DatasetPrompt]:
    """The dataset's entries in vLLM's order (shuffled with the seed unless disabled later)."""
    assert w.dataset_path is not None
    path = Path(w.dataset_path)
    entries = _read_json_entries(path, w.dataset_sha256)
    out: list[DatasetPrompt] = []
    for i, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            raise ConfigError(
                f"--dataset-path {path}: entry {i} is not an object", field="dataset_path"
            )
        if w.dataset_name == "sharegpt":
            conv = entry.get("conversations")
            if not isinstance(conv, list) or len(conv) < 2:
                continue  # vLLM keeps entries with at least two turns
            try:
                prompt, completion = str(conv[0]["value"]), str(conv[1]["value"])
            except (KeyError, TypeError):
                raise ConfigError(
                    f"--dataset-path {path}: entry {i}: conversations[0] and [1] need a "
                    '\'value\' (ShareGPT: {"from": "human", "value": "..."})',
                    field="dataset_path",
                ) from None
            out.append(DatasetPrompt(prompt, None, None, completion))
            continue
        out_len = entry.get("output_tokens")
        if out_len is not None and not (isinstance(out_len, int) and out_len >= 1):
            raise ConfigError(
                f"--dataset-path {path}: entry {i}: output_tokens={out_len!r} must be an "
                "integer >= 1",
                field="dataset_path",
            )
        if isinstance(entry.get("prompt"), str):
            out.append(DatasetPrompt(entry["prompt"], None, out_len))
        elif isinstance(entry.get("prompt_token_ids"), list) and all(
            isinstance(t, int) and t >= 0 for t in entry["prompt_token_ids"]
        ):
            out.append(DatasetPrompt(None, tuple(entry["prompt_token_ids"]), out_len))
        else:
            raise ConfigError(
                f"--dataset-path {path}: entry {i} needs 'prompt' (text) or 'prompt_token_ids' "
                '(a list of ids), e.g. {"prompt": "What is the capital of India?"}',
                field="dataset_path",
            )
    return out


def dataset_order(entries: list[DatasetPrompt], seed: int, disable_shuffle: bool) -> list[Any]:
    """vLLM's ``random.seed(seed); random.shuffle(data)`` (the same order for the same seed)."""
    items = list(entries)
    if not disable_shuffle:
        random.Random(seed).shuffle(items)
    return items


async def plan_dataset(
    cfg: RunConfig, tok: Any, special_tokens: int
) -> tuple[list[PlannedRequest], dict[str, Any]]:
    """The dataset's requests (text sent as written) and what the prompts info records.

    ``tok``: the served tokenizer (:mod:`kvbudget.load.served_prompts`), or ``None`` for
    kvbudget's synthetic one (``kvbudget serve``); counts are ``len(encode(text))`` plus the
    special tokens the server adds, as vLLM's ``len(tokenizer(prompt).input_ids)``.
    """
    w = cfg.workload
    synthetic = get_tokenizer(cfg.vocab_size)

    async def encode(text: str) -> list[int]:
        if tok is None:
            return synthetic.encode(text)
        return list(await tok.encode(text))

    async def decode(ids: Sequence[int]) -> str:
        if tok is None:
            return synthetic.decode(ids)
        return str(await tok.decode(list(ids)))

    entries = dataset_order(read_dataset(w), cfg.seed, w.disable_shuffle)
    wanted = cfg.num_requests if cfg.num_requests is not None else len(entries)
    plans: list[tuple[str, int, int]] = []  # (text, prompt tokens, output tokens)
    dropped = 0
    for entry in entries:
        if len(plans) >= wanted:
            break
        if entry.text is None:
            assert entry.token_ids is not None
            text = await decode(entry.token_ids)
            n_prompt = len(entry.token_ids) + special_tokens
        else:
            text = entry.text
            n_prompt = len(await encode(text)) + special_tokens
        if w.dataset_name == "sharegpt":
            out_len = w.sharegpt_output_len
            if out_len is None:
                out_len = len(await encode(entry.completion or "")) + special_tokens
            if not is_valid_sequence(
                n_prompt, out_len, skip_min_output_len_check=w.sharegpt_output_len is not None
            ):
                dropped += 1
                continue
        else:
            out_len = entry.output_tokens or w.custom_output_len or cfg.output_tokens
        plans.append((text, n_prompt, out_len))
    if not plans:
        raise ConfigError(
            f"--dataset-path {w.dataset_path}: no usable prompt"
            + (f" ({dropped} dropped by vLLM's length filter)" if dropped else ""),
            field="dataset_path",
        )
    # vLLM oversamples a short dataset (maybe_oversample_requests): here, in order again;
    # without --num-requests every usable entry once
    if cfg.num_requests is None:
        wanted = len(plans)
    repeated = max(0, wanted - len(plans))
    chosen = [plans[i % len(plans)] for i in range(wanted)]
    offsets = arrival_offsets(cfg) if cfg.open_loop else None
    if offsets is not None:
        chosen = chosen[: len(offsets)]
    out = []
    for i, (text, n_prompt, out_len) in enumerate(chosen):
        out.append(
            PlannedRequest(
                request_id=f"r{i:07d}",
                arrival_s=0.0 if offsets is None else float(offsets[i]),
                # the served tokenizer's count; the ids stand in for the text's length only
                prompt_token_ids=tuple(range(n_prompt)),
                output_tokens=out_len,
                prompt_text=text,
                cache_salt=cfg.cache_salt,
                cancel_after_tokens=_cancel(cfg, i),
            )
        )
    info = {
        "dataset_name": w.dataset_name,
        "dataset_sha256": w.dataset_sha256,
        "dataset_entries": len(entries),
        "dataset_dropped_by_length_filter": dropped,
        "dataset_repeated": repeated,
        "shuffled": not w.disable_shuffle,
        "prompt_tokens_total": sum(r.prompt_tokens for r in out),
        "prompt_tokens_source": "synthetic tokenizer" if tok is None else tok.source,
    }
    return out, info


def _cancel(cfg: RunConfig, index: int) -> int | None:
    if cfg.cancel_after_tokens is None:
        return None
    rng = np.random.default_rng([cfg.seed, index, 0xCA])
    return cfg.cancel_after_tokens if rng.random() < cfg.cancel_fraction else None


def session_key(req: PlannedRequest) -> str:
    """What keeps a request on one worker: its session (every turn together), else itself."""
    return req.session_id or req.request_id
