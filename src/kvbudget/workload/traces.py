"""Trace import/export as JSONL with block hash ids (prompts never stored as text by default).

One JSON object per line. Export writes::

    {"request_id": "r000000", "arrival_s": 0.0, "input_length": 1000, "output_length": 128,
     "block_size": 16, "hash_ids": [0, 1, 2, ...], "prompt_sha256": "…", "tenant": "default",
     "session_id": null, "prefix_group": 3}

``hash_ids`` follow the Mooncake trace convention: the prompt is cut into blocks of
``block_size`` tokens (the last block may be partial); block ``i`` gets the chain hash
``sha256(hash[i-1] | cache_salt if i == 0 | token ids of block i as little-endian uint32)``
and each distinct chain hash is numbered 0, 1, 2 … in order of first appearance in the file.
Two requests share hash id ``k`` at position ``i`` exactly when their first ``i+1`` blocks
are identical (and their salts equal), so a replay reproduces the prefix-sharing structure
without the text. ``prompt_sha256`` is the sha256 of the prompt text (UTF-8). Token ids are
written (``prompt_token_ids``) only with ``keep_prompts=True``.

Import accepts that format and Mooncake's (``timestamp`` in milliseconds instead of
``arrival_s``; ``block_size`` absent: pass it, Mooncake uses 512). Without
``prompt_token_ids`` each hash id's block is regenerated deterministically from
``(base_seed, hash_id)`` so identical ids give identical tokens.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvbudget.errors import ConfigError, shown_value
from kvbudget.validation import first_problem
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.sessions import compact
from kvbudget.workload.tokenizer import SyntheticTokenizer


def arrival_of(arrival_s: float | None, timestamp_ms: float | None) -> float:
    """A line's arrival in seconds: ``arrival_s``, else Mooncake's ``timestamp`` (ms), else 0."""
    if arrival_s is not None:
        return arrival_s
    if timestamp_ms is not None:
        return timestamp_ms / 1000.0
    return 0.0


class TraceRecord(BaseModel):
    """One line of a trace file."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    request_id: str | None = None
    arrival_s: float | None = Field(None, ge=0)
    timestamp: float | None = Field(None, ge=0, description="Mooncake: milliseconds")
    input_length: int = Field(ge=1)
    output_length: int = Field(ge=1)
    hash_ids: list[int] = Field(default_factory=list)
    block_size: int | None = Field(None, ge=1)
    prompt_sha256: str | None = None
    prompt_token_ids: list[int] | None = None
    tenant: str = "default"
    session_id: str | None = None
    prefix_group: int | None = None

    def arrival(self) -> float:
        return arrival_of(self.arrival_s, self.timestamp)


class TraceReplaySpec(BaseModel):
    """The ``trace:`` block of a workload: replay a JSONL trace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    block_size: int = Field(512, ge=1, description="for lines without block_size (Mooncake)")
    speedup: float = Field(1.0, gt=0, description="divide recorded arrival times by this")


def block_chain_hashes(
    token_ids: Sequence[int], block_size: int, cache_salt: str | None = None
) -> list[bytes]:
    """sha256 chain over blocks of ``block_size`` tokens (last block may be partial)."""
    ids = np.asarray(token_ids, dtype="<u4")
    parent = b""
    out: list[bytes] = []
    for start in range(0, ids.size, block_size):
        h = hashlib.sha256(parent)
        if start == 0 and cache_salt:
            h.update(cache_salt.encode("utf-8"))
        h.update(ids[start : start + block_size].tobytes())
        parent = h.digest()
        out.append(parent)
    return out


def export_trace(
    requests: Iterable[PlannedRequest],
    path: str | Path,
    *,
    block_size: int = 16,
    keep_prompts: bool = False,
    tokenizer: SyntheticTokenizer | None = None,
) -> int:
    """Write ``requests`` as JSONL; returns the number of lines written."""
    if block_size < 1:
        raise ConfigError(f"block_size={block_size} must be >= 1", field="block_size")
    ids_of: dict[bytes, int] = {}
    count = 0
    with Path(path).open("w", encoding="utf-8") as fh:
        for req in requests:
            chain = block_chain_hashes(req.prompt_token_ids, block_size, req.cache_salt)
            hash_ids = [ids_of.setdefault(h, len(ids_of)) for h in chain]
            text = req.prompt_text
            if text is None:
                text = (
                    tokenizer.decode(req.prompt_token_ids) if tokenizer is not None else req.text()
                )
            line: dict[str, object] = {
                "request_id": req.request_id,
                "arrival_s": req.arrival_s,
                "input_length": req.prompt_tokens,
                "output_length": req.output_tokens,
                "block_size": block_size,
                "hash_ids": hash_ids,
                "prompt_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "tenant": req.tenant,
                "session_id": req.session_id,
                "prefix_group": req.prefix_group,
            }
            if keep_prompts:
                line["prompt_token_ids"] = list(req.prompt_token_ids)
            fh.write(json.dumps(line, separators=(",", ":")) + "\n")
            count += 1
    return count


class _Arrival(BaseModel):
    """A trace line's arrival fields alone, validated as :class:`TraceRecord` validates them
    (the order pre-pass of :func:`stream_trace_requests`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    arrival_s: float | None = Field(None, ge=0)
    timestamp: float | None = Field(None, ge=0)

    def arrival(self) -> float:
        return arrival_of(self.arrival_s, self.timestamp)


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], p: Path, lineno: int, raw: str) -> M:
    """One line as ``model``; a bad line is a ``ConfigError`` naming the line and field."""
    try:
        return model.model_validate(json.loads(raw))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{p}:{lineno}: not valid JSON ({exc.msg}); each line must be one object",
            field="trace",
        ) from None
    except ValidationError as exc:
        problem = first_problem(exc)  # compiler style: the line first, then its field
        raise ConfigError(
            f"{p}:{lineno}: field {problem.where}={shown_value(problem.value)}: "
            f"{problem.message}; fix the line (see docs/workloads.md)",
            field=problem.where or "trace",
        ) from None


def _lines(path: str | Path, model: type[M]) -> Iterator[M]:
    """The file's non-blank lines as ``model``, one at a time."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"trace file {str(p)!r} does not exist; check trace.path", field="path")
    with p.open(encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip():
                yield _parse(model, p, lineno, raw)


def read_trace(path: str | Path) -> list[TraceRecord]:
    """Parse a JSONL trace; a bad line is a ``ConfigError`` naming the line and field."""
    return list(_lines(path, TraceRecord))


def stream_trace_requests(
    path: str | Path,
    tokenizer: SyntheticTokenizer,
    *,
    base_seed: int,
    default_block_size: int = 512,
    speedup: float = 1.0,
    num_requests: int | None = None,
    duration_s: float | None = None,
    cell_id: str | None = None,
    compact_ids: bool = False,
) -> Iterator[PlannedRequest]:
    """The trace's planned requests in arrival order (arrivals shifted to start at 0, divided
    by ``speedup``), without holding the trace.

    ``compact_ids``: prompts regenerated from hash ids as ``array('q')`` (the same ids; see
    :func:`~kvbudget.workload.spec.generate_stream`); a line's own ``prompt_token_ids`` stay a
    tuple.

    A first pass reads only each line's arrival fields. When they never decrease (a recorded
    trace's order, Mooncake's included), the requests are built while the file is read, in
    memory that does not grow with its length: the same requests as sorting first (the sort is
    stable, so ties keep the file's order). A trace out of order is read whole and sorted. A
    bad line is the error :func:`read_trace` gives (the file's first bad line); on the streamed
    path a bad field other than the arrival is found when its line is reached, after the
    requests before it were given. A file that changes between the passes is refused.
    """
    first: float | None = None
    last = -math.inf
    in_order = True
    try:
        for a in _lines(path, _Arrival):
            t = a.arrival()
            first = t if first is None else first
            if t < last:
                in_order = False
                break
            last = t
    except ConfigError as exc:
        read_trace(path)  # names the file's first bad line, whichever field it is
        raise exc from None
    if first is None:
        return
    if in_order:
        indexed: Iterable[tuple[int, TraceRecord]] = _unchanged(
            enumerate(_lines(path, TraceRecord)), first, path
        )
    else:
        records = read_trace(path)
        order = sorted(range(len(records)), key=lambda i: records[i].arrival())
        first = records[order[0]].arrival()
        indexed = ((i, records[i]) for i in order)
    yield from _requests(
        indexed,
        first,
        tokenizer,
        base_seed=base_seed,
        default_block_size=default_block_size,
        speedup=speedup,
        num_requests=num_requests,
        duration_s=duration_s,
        cell_id=cell_id,
        compact_ids=compact_ids,
    )


def _unchanged(
    indexed: Iterator[tuple[int, TraceRecord]], first: float, path: str | Path
) -> Iterator[tuple[int, TraceRecord]]:
    """The in-order pass's records, refused if the file no longer is what the pre-pass read
    (its first arrival moved, or its arrivals now decrease)."""
    last = first
    for i, rec in indexed:
        t = rec.arrival()
        if (i == 0 and t != first) or t < last:
            raise ConfigError(
                f"trace file {str(path)!r} changed while it was replayed (line {i + 1} of its "
                "records now arrives out of order); replay a copy that does not change",
                field="path",
            )
        last = t
        yield i, rec


#: hash ids' regenerated blocks kept at once (a block's tokens are a function of its id, so
#: the bound changes no request, only how often a block is drawn again)
BLOCK_CACHE_SIZE = 4096


def _requests(
    indexed: Iterable[tuple[int, TraceRecord]],
    t0: float,
    tokenizer: SyntheticTokenizer,
    *,
    base_seed: int,
    default_block_size: int,
    speedup: float,
    num_requests: int | None,
    duration_s: float | None,
    cell_id: str | None,
    compact_ids: bool,
) -> Iterator[PlannedRequest]:
    """Records ``(index in the file, record)`` in arrival order, as planned requests."""
    blocks: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
    for count, (i, rec) in enumerate(indexed):
        arrival_s = (rec.arrival() - t0) / speedup
        if duration_s is not None and arrival_s >= duration_s:
            return
        if num_requests is not None and count >= num_requests:
            return
        ids: Sequence[int]
        if rec.prompt_token_ids is not None:
            ids = tuple(int(x) for x in rec.prompt_token_ids)
        else:
            bs = rec.block_size or default_block_size
            pieces: list[np.ndarray] = []
            for h in rec.hash_ids:
                block = blocks.get((h, bs))
                if block is None:
                    block = tokenizer.random_ids(np.random.default_rng([base_seed, h]), bs)
                    blocks[(h, bs)] = block
                    if len(blocks) > BLOCK_CACHE_SIZE:
                        blocks.popitem(last=False)
                else:
                    blocks.move_to_end((h, bs))
                pieces.append(block)
            have = sum(p.size for p in pieces)
            if have < rec.input_length:  # hash ids missing or too few: fresh tail tokens
                tail_rng = np.random.default_rng([base_seed, 1 << 40, i])
                pieces.append(tokenizer.random_ids(tail_rng, rec.input_length - have))
            drawn = np.concatenate(pieces)[: rec.input_length]
            ids = compact(drawn) if compact_ids else tuple(drawn.tolist())
        yield PlannedRequest(
            request_id=rec.request_id or f"r{count:06d}",
            arrival_s=float(arrival_s),
            prompt_token_ids=ids,
            output_tokens=rec.output_length,
            tenant=rec.tenant,
            session_id=rec.session_id,
            prefix_group=rec.prefix_group,
            cell_id=cell_id,
        )
