"""Replica configuration: the simulated engine's pool, groups and scheduler limits.

A :class:`ReplicaConfig` is what a vLLM-V1-like engine knows after start-up: how many KV blocks
it got (``num_gpu_blocks``, including the null block 0, as vLLM logs it), the tokens per block,
its KV cache groups, and the scheduler limits. Build one by hand, or from a ``PlanResult`` with
:func:`kvbudget.sim.fromplan.replica_config_from_plan` (one source of truth with ``plan``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GroupKind = Literal["full", "sliding", "state"]
SchedulingPolicy = Literal["fcfs", "priority"]
HashAlgo = Literal["builtin", "sha256"]


class KVGroupConfig(BaseModel):
    """One KV cache group (vLLM ``KVCacheGroupSpec``), all its layers share one block table.

    - ``full``: one block per ``block_size`` tokens of the sequence.
    - ``sliding``: like full, but blocks wholly outside the last ``sliding_window_tokens``
      are released (replaced by the null block), as vLLM's ``SlidingWindowManager`` does.
    - ``state``: a fixed page per sequence (mamba / linear-attention state), one block per
      running request whatever its length.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: GroupKind = "full"
    num_layers: int = Field(default=1, ge=1)
    sliding_window_tokens: int | None = Field(default=None, ge=1)
    #: bytes of one block of one layer on one rank (vLLM ``page_size_bytes``); 0 = unknown
    page_size_bytes: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _window(self) -> KVGroupConfig:
        if self.kind == "sliding" and self.sliding_window_tokens is None:
            raise ValueError(
                "kv group kind 'sliding' needs sliding_window_tokens (e.g. 4096); "
                "set it or use kind 'full'"
            )
        return self


class ReplicaConfig(BaseModel):
    """Everything the simulated engine needs to allocate blocks and schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "replica-0"
    num_gpu_blocks: int = Field(ge=2)
    block_size: int = Field(default=16, ge=1)
    kv_groups: tuple[KVGroupConfig, ...] = (KVGroupConfig(),)
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    max_model_len: int = Field(default=131072, ge=1)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    #: KV bytes of one token over all layers and all TP ranks of the replica (tiers size their
    #: blocks with it: vLLM offloads every worker's copy, docs/engine-facts.md); 0 = unknown
    kv_bytes_per_token: int = Field(default=0, ge=0)
    policy: SchedulingPolicy = "fcfs"
    hash_algo: HashAlgo = "builtin"
    #: vLLM ``long_prefill_token_threshold`` (0 = no per-request chunk cap)
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    #: vLLM ``--async-scheduling``: step k+1 is scheduled while step k runs
    #: (``EngineCore.step_with_batch_queue``), so a request that reaches a busy engine joins the
    #: step after the next one (kvbudget.sim.driver); an idle engine takes it at once
    async_scheduling: bool = False

    @model_validator(mode="after")
    def _limits(self) -> ReplicaConfig:
        if not self.kv_groups:
            raise ValueError("kv_groups is empty; give at least one group (kind 'full')")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below "
                f"max_model_len={self.max_model_len} with chunked prefill off; raise "
                "max_num_batched_tokens or enable chunked prefill"
            )
        return self

    @property
    def num_usable_blocks(self) -> int:
        """Blocks a request can get (all but the null block)."""
        return self.num_gpu_blocks - 1

    @property
    def block_bytes(self) -> int:
        """Bytes of one block id across every layer it covers (0 if page sizes unknown)."""
        return max((g.page_size_bytes * g.num_layers for g in self.kv_groups), default=0)

    @property
    def prefix_caching_effective(self) -> bool:
        """Prefix caching is modelled for full and sliding-window groups, not state (see docs)."""
        return self.enable_prefix_caching and all(g.kind != "state" for g in self.kv_groups)

    def blocks_for_tokens(self, num_tokens: int) -> int:
        """Blocks one sequence of ``num_tokens`` holds at its peak, over all groups."""
        total = 0
        for group in self.kv_groups:
            if group.kind == "state":
                total += 1
            elif group.kind == "sliding" and group.sliding_window_tokens is not None:
                # vLLM SlidingWindowSpec.max_memory_usage_bytes: a prefill chunk of up to
                # max_num_batched_tokens is held whole before the window trims it
                window = min(
                    num_tokens, group.sliding_window_tokens - 1 + self.max_num_batched_tokens
                )
                total += -(-window // self.block_size) + 1
            else:
                total += -(-num_tokens // self.block_size)
        return total
