"""Configuration of one load run (persisted as ``run.json`` so ``--resume`` can continue it).

The API key itself is never part of the configuration: only the NAME of the environment
variable that holds it (``api_key_env``).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvbudget.metrics.percentile_set import DEFAULT_METRIC_PERCENTILES
from kvbudget.safety.limits import (
    MAX_CONCURRENCY,
    MAX_RATE_PER_S,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_VOCAB,
    MAX_WORKERS,
    MIN_RATE_PER_S,
)
from kvbudget.safety.redact import redact_url, register_url_secrets


class BenchWorkload(BaseModel):
    """``bench``'s workload options beyond one fixed prompt length (:mod:`kvbudget.load.workloads`):
    the prompt structures ``sim`` simulates, a dataset of prompts, or a trace to replay."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: sim's names: shared-prefix groups (Zipf popularity) and their prefix tokens (0 groups:
    #: one system prompt of ``shared_prefix_tokens``); both inside ``--input-tokens``
    prefix_groups: int = Field(default=0, ge=0, le=MAX_CONCURRENCY)
    shared_prefix_tokens: int = Field(default=0, ge=0, le=MAX_REQUEST_TOKENS)
    #: vllm bench serve's random dataset: one prefix of this many tokens before every prompt,
    #: added to ``--input-tokens`` (as vLLM adds it)
    random_prefix_len: int = Field(default=0, ge=0, le=MAX_REQUEST_TOKENS)
    #: vllm bench serve's ``--random-range-ratio`` (text as given: a number or a JSON object)
    random_range_ratio: str | None = None
    #: multi-turn sessions: turns per session, planned seconds between a session's turns
    num_turns: int = Field(default=1, ge=1, le=1000)
    turn_interval_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    #: trace replay (sim's trace format, kvbudget.workload.traces)
    trace_path: str | None = None
    trace_speedup: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    trace_block_size: int = Field(default=512, ge=1)
    #: sha256 of the trace file's bytes, set by the run when it starts (as ``dataset_sha256``)
    trace_sha256: str | None = Field(default=None, pattern="^[0-9a-f]{64}$")
    #: vllm bench serve's datasets: random (synthetic), sharegpt, custom (JSONL of prompts)
    dataset_name: Literal["random", "sharegpt", "custom"] = "random"
    dataset_path: str | None = None
    sharegpt_output_len: int | None = Field(default=None, ge=1, le=MAX_REQUEST_TOKENS)
    custom_output_len: int | None = Field(default=None, ge=1, le=MAX_REQUEST_TOKENS)
    disable_shuffle: bool = False
    #: sha256 of the dataset file's bytes, set by the run when it starts (never by the user):
    #: ``--resume`` re-reads the file and refuses a different one
    dataset_sha256: str | None = Field(default=None, pattern="^[0-9a-f]{64}$")

    @property
    def dataset(self) -> bool:
        """A dataset of prompts (sent as written, not rebuilt to a length)."""
        return self.dataset_name != "random"

    @property
    def multi_turn(self) -> bool:
        return self.num_turns > 1

    @property
    def planned(self) -> bool:
        """Whether the requests are planned from these options (else bench's own synthetic ones)."""
        return self != BenchWorkload()


Shape = Literal["closed", "constant", "poisson", "gamma", "burst", "ramp", "planned"]
TokenCheck = Literal["none", "server", "local"]


class RunConfig(BaseModel):
    """Everything that defines a load run against one OpenAI-compatible endpoint."""

    model_config = ConfigDict(extra="forbid")

    #: the server root (a trailing ``/v1`` is dropped: the OpenAI SDK's habit means the same)
    base_url: str
    #: the name put in requests; empty: the first model of ``GET /v1/models``
    model: str = ""
    endpoint: Literal["completions", "chat"] = "completions"
    shape: Shape = "closed"
    #: closed loop: requests kept in flight
    concurrency: int = Field(default=1, ge=1, le=MAX_CONCURRENCY)
    #: open loop (constant/poisson/gamma): offered requests per second
    rate_per_s: float | None = Field(default=None, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)
    gamma_cv: float = Field(default=1.0, gt=0)
    #: step ramp: (rate_per_s, stage_s) stages, back to back
    ramp_stages: list[tuple[float, float]] = Field(default_factory=list)
    num_requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    duration_s: float | None = Field(default=None, gt=0)
    #: the first requests of the run are sent and recorded but excluded from the summary
    warmup_requests: int = Field(default=0, ge=0, le=MAX_REQUESTS)
    timeout_s: float = Field(default=60.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    #: open loop: most requests in flight at once (the client waits beyond it; lag shows it)
    max_inflight: int = Field(default=1024, ge=1, le=MAX_CONCURRENCY)
    prompt_tokens: int = Field(default=32, ge=1, le=MAX_REQUEST_TOKENS)
    output_tokens: int = Field(default=64, ge=1, le=MAX_REQUEST_TOKENS)
    ignore_eos: bool = True
    vocab_size: int = Field(default=32000, ge=8, le=MAX_VOCAB)
    cache_salt: str | None = None
    #: cancellation injection: abort after this many streamed tokens ...
    cancel_after_tokens: int | None = Field(default=None, ge=1, le=MAX_REQUEST_TOKENS)
    #: ... on this fraction of requests (seeded)
    cancel_fraction: float = Field(default=1.0, ge=0, le=1)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    keep_prompts: bool = False
    api_key_env: str | None = None
    check_tokens: TokenCheck = "none"
    #: whose tokens prompt lengths count: "auto" (the served model's tokenizer: its local
    #: directory, the local HF cache, or the server's /tokenize), "synthetic" (kvbudget's
    #: one-word-per-token tokenizer), or a tokenizer path / hub id (vLLM's --tokenizer)
    tokenizer: str = "auto"
    metrics_url: str | None = None
    scrape_interval_s: float = Field(default=1.0, gt=0)
    baseline_s: float = Field(default=0.0, ge=0)
    #: what the records are: set by the run from the server's identity, never by the user
    #: (``simulated`` when the endpoint is ``kvbudget serve``, whose latencies are simulated)
    record_source: Literal["measured", "simulated"] = "measured"
    #: percentiles of TTFT, TPOT, ITL and E2E in the summary (``--metric-percentiles``)
    metric_percentiles: tuple[float, ...] = DEFAULT_METRIC_PERCENTILES
    #: ``--goodput``: SLOs in milliseconds by vLLM key (ttft, tpot, e2el); empty: no goodput
    goodput: dict[str, float] = Field(default_factory=dict)
    #: the workload beyond one fixed prompt length (shared prefixes, sessions, a dataset, a trace)
    workload: BenchWorkload = Field(default_factory=BenchWorkload)

    @field_validator("base_url", "metrics_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://, e.g. http://127.0.0.1:8000")
        return url

    @field_validator("base_url")
    @classmethod
    def _root(cls, url: str) -> str:
        from kvbudget.load.urls import base_with_query

        register_url_secrets(url)  # a key in the URL is scrubbed wherever it is quoted
        return base_with_query(url)

    @field_validator("metrics_url")
    @classmethod
    def _metrics_secrets(cls, url: str | None) -> str | None:
        register_url_secrets(url)
        return url

    @property
    def endpoint_url(self) -> str:
        """The URL every request is posted to."""
        from kvbudget.load.urls import ENDPOINT_PATHS

        return self.base_url + ENDPOINT_PATHS[self.endpoint]

    @model_validator(mode="after")
    def _coherent(self) -> RunConfig:
        whole = self.shape == "planned" or self.workload.dataset  # a trace / dataset: all of it
        if self.num_requests is None and self.duration_s is None and not whole:
            raise ValueError("give num_requests or duration_s (or both), e.g. --num-requests 200")
        if self.shape in ("constant", "poisson", "gamma") and self.rate_per_s is None:
            raise ValueError(
                f"shape {self.shape!r} is open loop and needs rate_per_s, e.g. --rate 10"
            )
        if self.shape == "ramp" and not self.ramp_stages:
            raise ValueError("shape 'ramp' needs ramp_stages, e.g. --ramp 2:10,4:10,8:10")
        if self.shape == "burst" and self.num_requests is None:
            raise ValueError("shape 'burst' sends num_requests at once; give --num-requests")
        for rate, stage_s in self.ramp_stages:
            if not (rate > 0 and stage_s > 0 and math.isfinite(rate * stage_s)):
                raise ValueError(
                    f"ramp stage ({rate}, {stage_s}) needs a positive rate and duration"
                )
        return self

    @property
    def open_loop(self) -> bool:
        return self.shape != "closed"

    def same_run(self, other: RunConfig) -> list[str]:
        """Fields that differ from ``other`` (for ``--resume``), ignoring ``workers`` and what
        the run sets itself (``record_source``; ``workload.dataset_sha256`` and
        ``workload.trace_sha256``, which ``--resume`` checks on its own to name both hashes)."""
        own: dict[str, Any] = {"workers": True, "record_source": True}
        own["workload"] = {"dataset_sha256", "trace_sha256"}
        mine = self.model_dump(exclude=own)
        theirs = other.model_dump(exclude=own)
        for url in ("base_url", "metrics_url"):  # run.json keeps them without credentials
            for dump in (mine, theirs):
                if dump[url] is not None:
                    dump[url] = redact_url(dump[url])
        return sorted(k for k in mine if mine[k] != theirs[k])
