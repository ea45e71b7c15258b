"""``bench``'s datasets (``--dataset-name sharegpt|custom --dataset-path``), read as ``vllm bench
serve`` reads them (vLLM ``vllm/benchmarks/datasets/sharegpt.py`` ``ShareGPTDataset`` and
``custom.py`` ``CustomDataset``): shuffled with ``random.seed(seed); random.shuffle`` unless
``--disable-shuffle``; ShareGPT keeps entries with two or more turns, sends the first turn
and takes the output length from the second turn in the served tokenizer (or
``--sharegpt-output-len``), and drops pairs ``is_valid_sequence`` refuses (prompt < 4 or
> 1024 tokens, output < 4 unless the length is given, prompt + output > 2048). A custom
JSONL line is ``{"prompt": "..."}`` or ``{"prompt_token_ids": [...]}`` (ids of the served
tokenizer, decoded with it), with an optional ``"output_tokens"``; its output length is that,
else ``--custom-output-len``, else ``--output-tokens``.

Prompt text is never stored unless ``--keep-prompts`` (records keep its sha256).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
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
