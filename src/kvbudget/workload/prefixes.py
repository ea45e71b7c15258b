"""Prompt structure: shared prefixes, tenants with salts, dynamic fields, sessions.

A single-turn prompt is laid out as (``|`` = concatenation)::

    [dynamic if position=before] | system prompt | group prefix | [dynamic if after] | unique

- **system prompt** (``system_prompt_tokens``): identical for every request of a scope.
- **group prefix** (``num_groups`` groups of ``group_prefix_tokens``; ``group_kind`` names what
  they stand for: tool definitions, documents …): the group of a request (or session) is drawn
  with Zipf popularity ``P(group g) ∝ 1 / (g + 1) ** zipf_s`` (g = 0 is the most popular;
  ``zipf_s = 0`` is uniform).
- **scope**: ``global`` — every tenant sees the same system prompt and group contents (the
  cross-tenant reuse/leak case); ``tenant`` — each tenant has its own contents.
- **dynamic field** (``dynamic_tokens``, fresh random tokens per request, e.g. a timestamp or
  user id): placed ``after`` the shared part it leaves the shared prefix reusable; placed
  ``before`` it, no two prompts share a first block and prefix reuse drops to zero.
- **unique** part: fresh random tokens (the user's question).

Content is deterministic: each shared piece is drawn from its own generator seeded with
``(base_seed, piece kind, tenant index or -1, group)`` so it does not depend on how many
requests were generated before it.

Sessions (multi-turn): turn ``k > 0`` sends the previous turn's prompt, then the previous
turn's synthetic output (:meth:`SyntheticTokenizer.output_ids`, what ``serve`` and ``sim``
would have answered), then a new user message.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbudget.workload.lengths import LengthSpec
from kvbudget.workload.tokenizer import SyntheticTokenizer

_PIECE_CODES = {"system": 1, "group": 2}


class PrefixSpec(BaseModel):
    """Shared prompt parts and the dynamic field (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system_prompt_tokens: int = Field(0, ge=0)
    num_groups: int = Field(0, ge=0, description="tool-definition / document groups")
    group_prefix_tokens: int = Field(0, ge=0)
    group_kind: Literal["tools", "document", "system"] = "document"
    zipf_s: float = Field(1.0, ge=0, description="Zipf exponent of group popularity")
    scope: Literal["global", "tenant"] = "global"
    dynamic_tokens: int = Field(0, ge=0)
    dynamic_position: Literal["before", "after"] = "after"

    @model_validator(mode="after")
    def _groups(self) -> PrefixSpec:
        if self.group_prefix_tokens > 0 and self.num_groups == 0:
            raise ValueError(
                f"group_prefix_tokens={self.group_prefix_tokens} needs num_groups >= 1"
            )
        return self

    @property
    def shared_tokens(self) -> int:
        """Tokens of system prompt plus group prefix."""
        return self.system_prompt_tokens + (self.group_prefix_tokens if self.num_groups else 0)


class TenantSpec(BaseModel):
    """Tenants, their traffic weights and their prefix-cache salts.

    ``salt``: ``none`` (no ``cache_salt``), ``per_tenant`` (kvbudget derives one salt per
    tenant, as a trusted gateway would: the first 16 hex digits of
    ``sha256("kvbudget-salt:<base_seed>:<tenant>")``) or ``custom`` (``salts`` maps each
    tenant to the salt the user supplies).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    names: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    weights: list[float] | None = None
    salt: Literal["none", "per_tenant", "custom"] = "none"
    salts: dict[str, str] | None = None

    @model_validator(mode="after")
    def _check(self) -> TenantSpec:
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"tenant names must be unique, got {self.names}")
        if self.weights is not None:
            if len(self.weights) != len(self.names):
                raise ValueError(
                    f"weights has {len(self.weights)} entries for {len(self.names)} tenants"
                )
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        if self.salt == "custom":
            missing = [n for n in self.names if not self.salts or n not in self.salts]
            if missing:
                raise ValueError(f"salt=custom needs salts for tenants {missing}")
        elif self.salts:
            raise ValueError("salts are only used with salt=custom; set salt: custom")
        return self

    def probabilities(self) -> np.ndarray:
        w = np.ones(len(self.names)) if self.weights is None else np.asarray(self.weights)
        return np.asarray(w, dtype=np.float64) / float(np.sum(w))

    def salt_for(self, tenant: str, base_seed: int) -> str | None:
        if self.salt == "none":
            return None
        if self.salt == "custom":
            assert self.salts is not None
            return self.salts[tenant]
        text = f"kvbudget-salt:{base_seed}:{tenant}".encode()
        return hashlib.sha256(text).hexdigest()[:16]


class SessionSpec(BaseModel):
    """Multi-turn sessions: ``num_turns`` turns ``turn_interval_s`` apart (planned arrivals).

    ``user_tokens`` is the length of each later turn's new user message (defaults to the
    workload's input distribution). A closed-loop runner should send turn ``k`` only after
    turn ``k - 1`` finished; the planned arrival is a lower bound.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_turns: int = Field(1, ge=1)
    turn_interval_s: float = Field(0.0, ge=0)
    user_tokens: LengthSpec | None = None


def zipf_probabilities(num_groups: int, zipf_s: float) -> np.ndarray:
    """``P(g) = (g+1)^-s / sum_j (j+1)^-s`` for ``g = 0 .. num_groups-1``."""
    if num_groups <= 0:
        return np.zeros(0)
    ranks = np.arange(1, num_groups + 1, dtype=np.float64)
    weights = ranks ** (-float(zipf_s))
    return np.asarray(weights / weights.sum(), dtype=np.float64)


class PromptBuilder:
    """Builds prompt token ids for one workload; caches the shared pieces."""

    def __init__(self, spec: PrefixSpec, tokenizer: SyntheticTokenizer, base_seed: int) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.base_seed = base_seed
        self._cache: dict[tuple[int, int, int], np.ndarray] = {}
        self._shared: dict[tuple[int, int], tuple[int, ...]] = {}

    def _piece(self, kind: str, tenant_index: int, group: int, length: int) -> np.ndarray:
        scope_index = tenant_index if self.spec.scope == "tenant" else -1
        key = (_PIECE_CODES[kind], scope_index, group)
        found = self._cache.get(key)
        if found is None:
            seed = [self.base_seed, key[0], scope_index + 1, group + 1]
            found = self.tokenizer.random_ids(np.random.default_rng(seed), length)
            self._cache[key] = found
        return found

    def shared_part(self, tenant_index: int, group: int | None) -> tuple[int, ...]:
        """System prompt followed by the group prefix (may be empty); cached as a tuple."""
        scope_index = tenant_index if self.spec.scope == "tenant" else -1
        key = (scope_index, -1 if group is None else group)
        found = self._shared.get(key)
        if found is not None:
            return found
        parts: list[np.ndarray] = []
        if self.spec.system_prompt_tokens:
            parts.append(self._piece("system", tenant_index, 0, self.spec.system_prompt_tokens))
        if group is not None and self.spec.group_prefix_tokens:
            parts.append(self._piece("group", tenant_index, group, self.spec.group_prefix_tokens))
        ids: tuple[int, ...] = tuple(np.concatenate(parts).tolist()) if parts else ()
        self._shared[key] = ids
        return ids

    def compose(
        self,
        shared: tuple[int, ...],
        dynamic: tuple[int, ...],
        unique: tuple[int, ...],
    ) -> tuple[tuple[int, ...], int]:
        """Lay out one first-turn prompt; returns (ids, reusable shared prefix tokens)."""
        if self.spec.dynamic_position == "before" and dynamic:
            return dynamic + shared + unique, 0
        return shared + dynamic + unique, len(shared)
