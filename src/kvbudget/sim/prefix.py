"""vLLM-compatible block-hash chain for the prefix cache.

``block_hash_i = H((parent_hash, tuple(token_ids of block i), extra_keys_or_None))`` with
``parent_hash = NONE_HASH`` for block 0 (reference engines-kv-accounting.md §5.1). Only full
blocks are hashed. ``extra_keys`` = adapter (LoRA) keys + multimodal keys + ``cache_salt``
(first block only; it propagates through the parent chain); ``None`` when empty.

Two hash functions:

* ``"builtin"``: Python ``hash()`` of the tuple (vLLM's default up to ~v0.9). Fast; the values
  are stable across processes for integer tokens, and a string salt is hashed per process,
  which only changes the numbers, never which blocks match inside one run.
* ``"sha256"``: ``sha256(pickle.dumps(x, HIGHEST_PROTOCOL))`` (vLLM's default since ~v0.10.2)
  with ``NONE_HASH = sha256(pickle("kvbudget"))``: vLLM seeds ``NONE_HASH`` from
  ``PYTHONHASHSEED`` or random bytes, so values never match a live engine's; the chain rule does.

Lookup: the longest run of consecutive cached blocks from the start, capped so that at least the
last prompt token is recomputed (:func:`max_cache_hit_tokens`).
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

from kvbudget.sim.config import HashAlgo

BlockHash = Any
HashFn = Callable[[Any], BlockHash]


def _sha256(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


NONE_HASH_BUILTIN: int = int.from_bytes(b"kvbudget", "big")
NONE_HASH_SHA256: bytes = _sha256("kvbudget")


def hash_fn_for(algo: HashAlgo) -> tuple[HashFn, BlockHash]:
    """(hash function, NONE_HASH) for ``algo``."""
    if algo == "sha256":
        return _sha256, NONE_HASH_SHA256
    return hash, NONE_HASH_BUILTIN


def extra_keys_for_block(
    start_token: int,
    *,
    adapter_id: str | int | None = None,
    mm_hashes: Sequence[str] = (),
    cache_salt: str | None = None,
) -> tuple[Any, ...] | None:
    """Extra keys of the block starting at ``start_token`` (salt on the first block only)."""
    keys: list[Any] = []
    if adapter_id is not None:
        keys.append(adapter_id)
    keys.extend(mm_hashes)
    if cache_salt is not None and start_token == 0:
        keys.append(cache_salt)
    return tuple(keys) if keys else None


def block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    *,
    algo: HashAlgo = "builtin",
    adapter_id: str | int | None = None,
    mm_hashes: Sequence[str] = (),
    cache_salt: str | None = None,
) -> list[BlockHash]:
    """Hashes of every full block of ``token_ids`` (a partial last block gets none)."""
    hasher = ChainHasher(
        block_size, algo=algo, adapter_id=adapter_id, mm_hashes=mm_hashes, cache_salt=cache_salt
    )
    out: list[BlockHash] = []
    hasher.extend(out, tuple(token_ids), len(token_ids))
    return out


def max_cache_hit_tokens(num_cached_blocks: int, block_size: int, num_prompt_tokens: int) -> int:
    """Tokens a hit may cover: whole cached blocks, leaving >= 1 prompt token to compute."""
    hit = num_cached_blocks * block_size
    if hit >= num_prompt_tokens:
        hit = ((num_prompt_tokens - 1) // block_size) * block_size
    return max(0, hit)


class ChainHasher:
    """Extends a request's block-hash list as its tokens become known."""

    __slots__ = ("_extra_first", "_extra_rest", "_fn", "_none", "block_size")

    def __init__(
        self,
        block_size: int,
        *,
        algo: HashAlgo = "builtin",
        adapter_id: str | int | None = None,
        mm_hashes: Sequence[str] = (),
        cache_salt: str | None = None,
    ) -> None:
        self.block_size = block_size
        self._fn, self._none = hash_fn_for(algo)
        self._extra_first = extra_keys_for_block(
            0, adapter_id=adapter_id, mm_hashes=mm_hashes, cache_salt=cache_salt
        )
        self._extra_rest = extra_keys_for_block(
            block_size, adapter_id=adapter_id, mm_hashes=mm_hashes, cache_salt=cache_salt
        )

    def extend(
        self,
        hashes: list[BlockHash],
        token_ids: Sequence[int],
        num_tokens: int,
        offset: int = 0,
    ) -> None:
        """Append hashes for every newly full block among the first ``num_tokens`` tokens.

        ``token_ids[0]`` is the token at position ``offset`` (a multiple of ``block_size``
        equal to ``len(hashes) * block_size`` when only new tokens are passed).
        """
        size = self.block_size
        fn = self._fn
        index = len(hashes)
        parent = hashes[-1] if hashes else self._none
        num_full = num_tokens // size
        if num_full <= index:
            return
        lo = index * size - offset
        # islice, not a slice: no copy of the (often 1,000+ token) sequence
        chunk = islice(token_ids, lo, num_full * size - offset)
        blocks = zip(*[chunk] * size, strict=False)
        if index == 0:
            parent = fn((parent, next(blocks), self._extra_first))
            hashes.append(parent)
        extra = self._extra_rest
        append = hashes.append
        for block in blocks:
            parent = fn((parent, block, extra))
            append(parent)
