"""Prompts of an exact length in the SERVED model's tokenizer.

A workload plans prompts as ids of kvbudget's synthetic tokenizer (one word per token): right
for the simulator and ``kvbudget serve``, wrong for a real engine, whose tokenizer splits those
words into several tokens (observed on vLLM: 256 planned, 668 counted). Before a run against a
real engine each planned prompt is rewritten in the served model's tokenizer with the same
length, as ``vllm bench serve``'s random dataset builds its prompts (vLLM 0.32.0
``vllm/benchmarks/datasets/datasets.py``: ``RandomDataset.generate_token_sequence`` and
``gen_prompt_decode_to_target_len``):

1. every synthetic id ``i`` becomes ``allowed[i % len(allowed)]``, ``allowed`` being the served
   vocabulary without its special ids (so requests that share a prefix still share it);
2. decode, re-encode; while the length is not the target, pad with seeded random allowed ids
   or truncate, and decode again (at most 10 retries, as vLLM; a left-over mismatch is kept and
   reported);
3. the target is the requested length minus the special tokens the server adds (BOS), as
   vLLM's ``num_special_tokens_to_add``.

Where the tokenizer comes from (never a download): ``--tokenizer`` (a directory with
``tokenizer.json``, the file itself, or a hub id found in the local Hugging Face cache), else
the served model's ``root`` from ``/v1/models`` when it is a local directory or cached hub id,
else the server's own ``POST /tokenize`` and ``POST /detokenize`` (vLLM, SGLang).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kvbudget.engine_name import KVBUDGET_SERVE
from kvbudget.errors import ConfigError
from kvbudget.load.client import OpenAIClient
from kvbudget.workload.request import PlannedRequest

MAX_RETRY = 10
EXTRA_TAIL_RETRY = 40
SYNTHETIC = "synthetic"
AUTO = "auto"


class ServedTokenizer(Protocol):
    """The served model's tokenizer, local or remote (async either way)."""

    source: str

    async def encode(self, text: str) -> list[int]: ...

    async def decode(self, ids: list[int]) -> str: ...


@dataclass
class LocalTokenizer:
    """A ``tokenizer.json`` read with the ``tokenizers`` library."""

    path: Path
    source: str
    tok: Any

    async def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    async def decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=False))


@dataclass
class ServerTokenizer:
    """The server's ``/tokenize`` and ``/detokenize`` (vLLM and SGLang bodies)."""

    client: OpenAIClient
    model: str
    source: str = "server /tokenize and /detokenize"

    async def encode(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        status, got = await self.client.post_json("/tokenize", body)
        if status != 200 or not isinstance(got, dict) or not isinstance(got.get("tokens"), list):
            raise ConfigError(f"tokenizer: the server's /tokenize answered {status}: {got!r:.200}")
        return [int(t) for t in got["tokens"]]

    async def decode(self, ids: list[int]) -> str:
        status, got = await self.client.post_json(
            "/detokenize", {"model": self.model, "tokens": ids}
        )
        if status != 200 or not isinstance(got, dict) or not isinstance(got.get("prompt"), str):
            raise ConfigError(
                f"tokenizer: the server's /detokenize answered {status}: {got!r:.200}"
            )
        return str(got["prompt"])


def _tokenizers_file(path: Path, source: str) -> LocalTokenizer:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - tokenizers comes with transformers
        raise ConfigError(
            f"tokenizer: {path} needs the 'tokenizers' package; pip install tokenizers",
            field="tokenizer",
        ) from exc
    return LocalTokenizer(path=path, source=source, tok=Tokenizer.from_file(str(path)))


def local_tokenizer_file(name: str) -> Path | None:
    """``tokenizer.json`` for a directory, a file, or a hub id in the local HF cache."""
    p = Path(name).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        return p / "tokenizer.json" if (p / "tokenizer.json").is_file() else None
    if name.count("/") == 1 and not name.startswith(("/", ".")):
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:  # pragma: no cover
            return None
        got = try_to_load_from_cache(name, "tokenizer.json")
        if isinstance(got, str):
            return Path(got)
    return None


async def resolve_tokenizer(
    client: OpenAIClient, model: str, tokenizer: str, served_root: str | None, engine: str | None
) -> ServedTokenizer | None:
    """The tokenizer to build prompts with, or None for the synthetic one.

    ``tokenizer``: ``synthetic``; ``auto``; or a path / hub id (an error when not found).
    """
    if tokenizer == SYNTHETIC:
        return None
    if tokenizer != AUTO:
        path = local_tokenizer_file(tokenizer)
        if path is None:
            raise ConfigError(
                f"--tokenizer {tokenizer}: no tokenizer.json there and not in the local Hugging "
                "Face cache; give a directory holding tokenizer.json, or 'auto' / 'synthetic'",
                field="tokenizer",
            )
        return _tokenizers_file(path, f"--tokenizer {tokenizer}")
    if engine == KVBUDGET_SERVE:
        return None  # its tokenizer IS the synthetic one
    for name in (served_root, model):
        if name:
            path = local_tokenizer_file(name)
            if path is not None:
                return _tokenizers_file(path, f"served model {name} ({path})")
    remote = ServerTokenizer(client, model)
    try:
        await remote.decode(await remote.encode("hello world"))
    except ConfigError:
        return None
    return remote


@dataclass(frozen=True)
class PromptBuild:
    """How the prompts of a run were built (recorded in the run's document)."""

    tokenizer: str
    num_special_tokens: int
    requested_tokens_total: int
    built_tokens_total: int
    num_mismatched: int


async def num_special_tokens(tok: ServedTokenizer, client: OpenAIClient, model: str) -> int:
    """Tokens the server adds to a completion prompt (BOS), from its /tokenize when it has one."""
    status, got = await client.post_json("/tokenize", {"model": model, "prompt": "a"})
    if status == 200 and isinstance(got, dict) and isinstance(got.get("tokens"), list):
        return max(0, len(got["tokens"]) - len(await tok.encode("a")))
    return 0


async def exact_length_ids(
    tok: ServedTokenizer, ids: list[int], target: int, rng: np.random.Generator, allowed: np.ndarray
) -> tuple[str, int]:
    """(prompt, tokens it encodes to) per vLLM's gen_prompt_decode_to_target_len."""
    seq = list(ids)
    prompt = ""
    for attempt in range(MAX_RETRY + 1):
        prompt = await tok.decode(seq)
        seq = await tok.encode(prompt)
        if len(seq) == target or attempt == MAX_RETRY:
            break
        if len(seq) < target:
            seq.extend(int(i) for i in allowed[rng.integers(0, len(allowed), target - len(seq))])
        else:
            seq = seq[:target]
    # Beyond vLLM: where its retries end off target (the tail's bytes merge differently when
    # re-encoded), redraw a short random tail, a little longer each time, until exact.
    for attempt in range(EXTRA_TAIL_RETRY):
        if len(seq) == target:
            break
        keep = max(0, target - 1 - attempt // 4)
        tail = allowed[rng.integers(0, len(allowed), target - keep)]
        candidate = await tok.encode(await tok.decode(seq[:keep] + [int(i) for i in tail]))
        if len(candidate) == target:
            seq = candidate
            prompt = await tok.decode(seq)
    return prompt, len(seq)


async def allowed_ids(tok: ServedTokenizer) -> np.ndarray:
    """The served vocabulary without special ids (local: from the tokenizer itself)."""
    if isinstance(tok, LocalTokenizer):
        size = int(tok.tok.get_vocab_size(with_added_tokens=True))
        added = tok.tok.get_added_tokens_decoder()
        special = {int(k) for k, v in added.items() if getattr(v, "special", False)}
        return np.array([i for i in range(size) if i not in special], dtype=np.int64)
    # remote: the ids that encoding printable text can give, probed from the ASCII range
    seen: set[int] = set()
    for ch in range(32, 127):
        seen.update(await tok.encode(chr(ch) * 3 + " " + chr(ch)))
    return np.array(sorted(seen), dtype=np.int64)


async def served_prompts(
    requests: list[PlannedRequest],
    tok: ServedTokenizer,
    *,
    client: OpenAIClient,
    model: str,
    seed: int,
    continued_turns: bool = False,
) -> tuple[list[PlannedRequest], PromptBuild]:
    """The requests with ``prompt_text`` rewritten to their length in the served tokenizer.

    ``continued_turns``: a later turn of a session (``turn_index > 0``) is only its new user
    message, sent after the history, so the server adds no special token to it.
    """
    special = await num_special_tokens(tok, client, model)
    allowed = await allowed_ids(tok)
    if len(allowed) == 0:
        raise ConfigError(f"tokenizer {tok.source}: no usable token ids", field="tokenizer")
    out: list[PlannedRequest] = []
    built_total = 0
    mismatched = 0
    for req in requests:
        added = 0 if continued_turns and req.turn_index > 0 else special
        target = max(1, req.prompt_tokens - added)
        mapped = [int(allowed[i % len(allowed)]) for i in req.prompt_token_ids[:target]]
        digest = hashlib.blake2b(req.request_id.encode(), digest_size=8).digest()
        rng = np.random.default_rng([seed, int.from_bytes(digest, "big")])
        text, got = await exact_length_ids(tok, mapped, target, rng, allowed)
        built_total += got + added
        mismatched += got != target
        out.append(replace(req, prompt_text=text))
    build = PromptBuild(
        tokenizer=tok.source,
        num_special_tokens=special,
        requested_tokens_total=sum(r.prompt_tokens for r in requests),
        built_tokens_total=built_total,
        num_mismatched=mismatched,
    )
    return out, build
