"""Lower KV tiers (CPU memory, local disk, remote store) below the GPU prefix cache.

Each tier has a capacity, a bandwidth, a latency, a fixed format/conversion cost and a fixed
synchronisation cost per reload. Blocks are named by their prefix-cache hash (group 0 key) and
cost ``kv_bytes_per_token * block_size`` bytes each.

* Writes: ``offload`` policy copies a GPU block to the first tier when the GPU pool evicts it
  (the engine reuses the block); ``write_through`` copies every newly cached full block. A
  tier that is full evicts its least recently used block, which moves down to the next tier
  (if any) or is dropped.
* Reads: when a new request's GPU prefix hit ends, the blocks that follow are looked up in the
  tiers (a consecutive run). The reload is taken only when the seed's estimate
  ``lookup latency + bytes / bandwidth + format + sync`` (plus the wait for the tier's link)
  is below the prefill time it avoids (step-time model, same context); otherwise the engine
  recomputes (``num_declined_reloads``).
* Bandwidth sharing: each tier has one link; transfers queue on it (FIFO), so concurrent
  transfers share its bandwidth and a burst of offloads delays a reload.
* Swap preemption: with a ``cpu`` tier, a preempted request's full blocks are written to it
  before they are freed, and come back through the same reload rule.
* Compatibility (:mod:`kvbudget.spec.fingerprint`): a replica with a non-empty ``identity``
  (a :class:`~kvbudget.spec.fingerprint.CacheIdentity` digest) stores and looks up its blocks
  under ``(identity, hash)``, as a real store namespaces keys by model, format and sharding.
  An entry written under another identity is therefore never a hit; a lookup that stops at a
  block held only under another identity counts ``num_incompatible_misses``. The empty
  identity (the default) keeps plain hash keys, so single-identity runs are unchanged.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvbudget.errors import ConfigError
from kvbudget.sim.prefix import max_cache_hit_tokens
from kvbudget.sim.request import SimRequest
from kvbudget.sim.timing import StepTimeModel

TierName = Literal["cpu", "disk", "remote"]


class TierConfig(BaseModel):
    """One lower tier."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: TierName
    capacity_bytes: int = Field(gt=0)
    bandwidth_bytes_per_s: float = Field(gt=0)
    latency_s: float = Field(default=0.0, ge=0)
    format_s: float = Field(default=0.0, ge=0)
    sync_s: float = Field(default=0.0, ge=0)
    policy: Literal["offload", "write_through"] = "offload"


class Tier:
    """An LRU set of block keys with a FIFO link."""

    def __init__(self, config: TierConfig, block_bytes: int) -> None:
        self.config = config
        self.block_bytes = block_bytes
        self.capacity_blocks = config.capacity_bytes // block_bytes
        if self.capacity_blocks < 1:
            raise ConfigError(
                f"tier {config.name}: capacity {config.capacity_bytes} bytes holds no block "
                f"of {block_bytes} bytes; raise capacity_bytes",
                field="capacity_bytes",
            )
        self.blocks: OrderedDict[Hashable, None] = OrderedDict()
        #: raw block hash -> identity of its last writer (only for non-empty identities)
        self.writers: dict[Hashable, str] = {}
        self.link_free_at_s = 0.0
        self.reuse: dict[Hashable, int] = {}
        self.num_writes = 0
        self.num_reads = 0
        self.num_evictions = 0
        self.bytes_written = 0
        self.bytes_read = 0
        #: seconds the link spent moving blocks (sum of queued transfer durations)
        self.busy_s = 0.0

    def transfer(self, num_blocks: int, now_s: float) -> float:
        """Queue a transfer on the link; returns when it ends."""
        start = max(now_s, self.link_free_at_s)
        end = start + num_blocks * self.block_bytes / self.config.bandwidth_bytes_per_s
        self.link_free_at_s = end
        self.busy_s += end - start
        return end

    def put(self, key: Hashable) -> Hashable | None:
        """Store (or refresh) ``key``; returns the key it evicted, if any."""
        if key in self.blocks:
            self.blocks.move_to_end(key)
            return None
        self.blocks[key] = None
        self.num_writes += 1
        self.bytes_written += self.block_bytes
        if len(self.blocks) > self.capacity_blocks:
            old, _ = self.blocks.popitem(last=False)
            self.num_evictions += 1
            self.reuse.pop(old, None)
            if self.writers and isinstance(old, tuple) and len(old) == 2:
                identity, raw = old
                if self.writers.get(raw) == identity:
                    del self.writers[raw]
            return old
        return None


class TierStack:
    """The tiers of one replica (a remote tier object may be shared by several replicas)."""

    def __init__(
        self, tiers: list[Tier], timing: StepTimeModel, block_size: int, identity: str = ""
    ) -> None:
        self.tiers = tiers
        self.identity = identity
        #: lookups that stopped at a block held only under another deployment's identity
        self.num_incompatible_misses = 0
        self.timing = timing
        self.block_size = block_size
        self.num_declined_reloads = 0
        self.num_reloads = 0
        self.reload_s_total = 0.0
        #: per taken reload: seconds it waited for busy tier links before its own transfer
        self.reload_waits_s: list[float] = []
        self.now_s = 0.0
        #: GPU evictions are written to the first tier (its policy is ``offload``)
        self._offload = bool(tiers) and tiers[0].config.policy == "offload"

    def key(self, raw: Hashable) -> Hashable:
        """The tier key of a block hash under this stack's identity."""
        return (self.identity, raw) if self.identity else raw

    def holds(self, raw: Hashable) -> bool:
        """Whether some tier holds ``raw`` under this stack's identity."""
        key = self.key(raw)
        return any(key in t.blocks for t in self.tiers)

    def own_hashes(self, tier: Tier) -> list[Hashable]:
        """The block hashes ``tier`` holds under this stack's identity."""
        if not self.identity:
            return list(tier.blocks)
        return [k[1] for k in tier.blocks if isinstance(k, tuple) and k[0] == self.identity]

    @property
    def has_cpu(self) -> bool:
        return any(t.config.name == "cpu" for t in self.tiers)

    def store(self, keys: list[Hashable], now_s: float, level: int = 0) -> None:
        """Write blocks (by hash) to tier ``level``; its LRU victims cascade to the next tier."""
        self._store_keys([self.key(raw) for raw in keys], now_s, level)

    def _store_keys(self, keys: list[Hashable], now_s: float, level: int) -> None:
        """Write tier keys (namespaced by identity) to tier ``level`` and cascade its victims."""
        if level >= len(self.tiers) or not keys:
            return
        tier = self.tiers[level]
        tier.transfer(len(keys), now_s)
        if self.identity:
            for key in keys:
                if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
                    tier.writers[key[1]] = key[0]
        spilled = [old for old in (tier.put(k) for k in keys) if old is not None]
        self._store_keys(spilled, now_s, level + 1)

    def on_gpu_evict(self, block_id: int, key: Hashable) -> None:
        """BlockPool hook: a cached GPU block is being reused."""
        # (a key of group 1.. is a (group, hash) tuple: only group 0's blocks are written)
        if self._offload and key.__class__ is not tuple:
            self.store([key], self.now_s)

    def on_cache(self, keys: list[Hashable], now_s: float) -> None:
        """Newly cached full blocks (write-through tiers copy them)."""
        for level, tier in enumerate(self.tiers):
            if tier.config.policy == "write_through":
                self.store(keys, now_s, level)
                return

    def on_preempt(self, req: SimRequest, now_s: float) -> None:
        """Swap: write the victim's computed full blocks to the CPU tier before freeing."""
        for level, tier in enumerate(self.tiers):
            if tier.config.name == "cpu":
                num_full = min(req.num_computed_tokens // self.block_size, len(req.block_hashes))
                self.store(list(req.block_hashes[:num_full]), now_s, level)
                return

    def lookup(self, req: SimRequest, num_gpu_hit: int, now_s: float) -> tuple[int, float, str]:
        """(extra tokens to reload, ready time, tier name) or (0, now, "") to recompute."""
        self.now_s = now_s
        if not self.tiers or not req.block_hashes:
            return 0, now_s, ""
        start = num_gpu_hit // self.block_size
        found: list[tuple[Hashable, int]] = []
        for raw in req.block_hashes[start:]:
            key = self.key(raw)
            level = next((i for i, t in enumerate(self.tiers) if key in t.blocks), -1)
            if level < 0:
                if self.identity and any(
                    t.writers.get(raw, self.identity) != self.identity for t in self.tiers
                ):
                    self.num_incompatible_misses += 1
                break
            found.append((key, level))
        if not found:
            return 0, now_s, ""
        total = max_cache_hit_tokens(start + len(found), self.block_size, req.num_tokens)
        num_blocks = total // self.block_size - start
        if num_blocks <= 0:
            return 0, now_s, ""
        found = found[:num_blocks]
        per_level: dict[int, int] = {}
        for _, level in found:
            per_level[level] = per_level.get(level, 0) + 1
        ready = now_s
        waited_s = 0.0
        for level, count in sorted(per_level.items()):
            tier = self.tiers[level]
            c = tier.config
            wait = max(0.0, tier.link_free_at_s - ready)
            waited_s += wait
            ready = ready + wait + c.latency_s + count * tier.block_bytes / c.bandwidth_bytes_per_s
            ready += c.format_s + c.sync_s
        extra_tokens = num_blocks * self.block_size
        avoided = self.timing.prefill_time_s(extra_tokens, num_gpu_hit)
        if ready - now_s >= avoided:
            self.num_declined_reloads += 1
            return 0, now_s, ""
        for level, count in sorted(per_level.items()):
            tier = self.tiers[level]
            tier.transfer(count, now_s + tier.config.latency_s)
            tier.num_reads += count
            tier.bytes_read += count * tier.block_bytes
        for key, level in found:
            tier = self.tiers[level]
            tier.blocks.move_to_end(key)
            tier.reuse[key] = tier.reuse.get(key, 0) + 1
        self.num_reloads += 1
        self.reload_waits_s.append(waited_s)
        self.reload_s_total += ready - now_s
        name = self.tiers[max(per_level)].config.name
        return extra_tokens, ready, name

    def reuse_histogram(self) -> dict[str, dict[int, int]]:
        """Per tier: how many blocks were reloaded k times (k -> count)."""
        out: dict[str, dict[int, int]] = {}
        for tier in self.tiers:
            hist: dict[int, int] = {}
            for count in tier.reuse.values():
                hist[count] = hist.get(count, 0) + 1
            out[tier.config.name] = dict(sorted(hist.items()))
        return out
