"""Block-hash chain rules (reference §5.1), checked against hashes computed independently."""

from __future__ import annotations

import hashlib
import pickle

from kvbudget.sim.prefix import (
    NONE_HASH_SHA256,
    block_hashes,
    extra_keys_for_block,
    max_cache_hit_tokens,
)


def _sha(obj: object) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def test_sha256_chain_matches_hand_computation() -> None:
    tokens = list(range(10))
    got = block_hashes(tokens, 4, algo="sha256", cache_salt="s1")
    h0 = _sha((NONE_HASH_SHA256, (0, 1, 2, 3), ("s1",)))
    h1 = _sha((h0, (4, 5, 6, 7), None))  # salt only on the first block
    assert got == [h0, h1]  # tokens 8, 9 form a partial block: not hashed


def test_salt_changes_every_block_through_the_parent() -> None:
    tokens = list(range(16))
    plain = block_hashes(tokens, 4)
    salted = block_hashes(tokens, 4, cache_salt="tenant-a")
    assert all(a != b for a, b in zip(plain, salted, strict=True))
    assert block_hashes(tokens, 4, cache_salt="tenant-a") == salted


def test_adapter_and_mm_keys_on_every_block() -> None:
    assert extra_keys_for_block(0, adapter_id="lora1", mm_hashes=("img",), cache_salt="s") == (
        "lora1",
        "img",
        "s",
    )
    assert extra_keys_for_block(4, adapter_id="lora1", mm_hashes=("img",), cache_salt="s") == (
        "lora1",
        "img",
    )
    assert extra_keys_for_block(4) is None
    assert block_hashes(range(8), 4, adapter_id="a") != block_hashes(range(8), 4, adapter_id="b")


def test_shared_prefix_shares_leading_hashes_only() -> None:
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9], 4)
    b = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0], 4)
    c = block_hashes([0, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9], 4)
    assert a[:2] == b[:2] and a[2] != b[2]
    assert all(x != y for x, y in zip(a, c, strict=True))  # the chain carries the first change


def test_at_least_last_prompt_token_recomputed() -> None:
    assert max_cache_hit_tokens(2, 4, 12) == 8
    assert max_cache_hit_tokens(3, 4, 12) == 8  # all 12 cached: floor(11 / 4) * 4
    assert max_cache_hit_tokens(3, 4, 13) == 12
    assert max_cache_hit_tokens(1, 16, 16) == 0
