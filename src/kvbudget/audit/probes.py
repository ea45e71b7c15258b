"""How an audit talks to a target: one request at a time, with what the server reports.

A :class:`Probe` sends one prompt (``max_tokens=1``, greedy) and returns an
:class:`Observation` (client TTFT, ``usage.prompt_tokens_details.cached_tokens``), reads the
prefix-cache hit counter, resets the prefix cache, and runs a greedy non-streaming completion
(with logprobs where offered) for the reuse audit.

* ``probe_http.HttpProbe`` — any OpenAI-compatible endpoint (``/v1/completions``); figures
  are ``measured``. The API key is read from an environment variable by the caller and only
  ever sent in the ``Authorization`` header.
* ``probe_sim.SimProbe`` — the simulator's ``EngineCore`` in virtual time (built like
  ``kvbudget serve``'s manual pool: :func:`kvbudget.serve.build.build_engine`). TTFT = the
  virtual time of the first token + a seeded lognormal *simulated client/network jitter*;
  figures are ``simulated`` with the timing model named. Its output text follows tokenizer
  rule 4 (a deterministic function of the prompt), as ``kvbudget serve`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from kvbudget.records import Provenance


@dataclass(frozen=True, slots=True)
class Observation:
    """What one probe request showed."""

    ttft_s: float | None
    cached_tokens: int | None
    prompt_tokens: int | None
    ok: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A greedy completion: text, its tokens and top logprobs when the engine gives them."""

    text: str
    tokens: tuple[str, ...] | None
    top_logprobs: tuple[dict[str, float], ...] | None
    cached_tokens: int | None
    ok: bool = True
    error: str | None = None
    #: prompt tokens as the server counted them (``usage.prompt_tokens``), if reported
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class TargetIdentity:
    """Who answered (never secrets): kind, engine, version, source label."""

    kind: Literal["http", "sim"]
    source: Literal["measured", "simulated"]
    engine: str | None
    engine_version: str | None
    model: str
    timing_model: str | None = None
    base_url: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def provenance(self) -> Provenance:
        if self.source == "simulated":
            return Provenance(
                kind="simulated",
                timing_model=self.timing_model or "unknown",
                note=(
                    "kvbudget serve over HTTP: simulated step times delivered in real time"
                    if self.kind == "http"
                    else "virtual-time EngineCore + seeded lognormal simulated client/network "
                    "jitter"
                ),
            )
        return Provenance(
            kind="measured",
            engine=self.engine or "unknown",
            engine_version=self.engine_version or "unknown",
            hardware="unknown",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "source": self.source,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "model": self.model,
            "timing_model": self.timing_model,
            "base_url": self.base_url,
            "details": self.details,
        }


class Probe(Protocol):
    """The target interface both audits use (all calls strictly sequential)."""

    async def identity(self) -> TargetIdentity: ...

    async def send(
        self,
        prompt_ids: tuple[int, ...],
        prompt_text: str,
        *,
        tenant: str,
        cache_salt: str | None,
        request_id: str,
    ) -> Observation: ...

    async def hit_counter(self) -> float | None: ...

    async def reset(self) -> bool: ...

    async def complete(
        self, prompt_ids: tuple[int, ...], prompt_text: str, *, max_tokens: int, logprobs: int
    ) -> Completion: ...
