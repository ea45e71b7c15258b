"""Quality checkpoints, stop conditions, single-factor comparisons, rollback and canary.

All of these are declared before the run (seed: "停止条件在测试前写入").
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from kvbudget.accept.plan.errors import field_error
from kvbudget.accept.plan.lock import StrictModel
from kvbudget.sim.tiers import TierConfig

CheckKind = Literal["exact", "regex", "json_schema", "needle", "tool_call", "refusal"]
TierName = Literal["short", "medium", "long"]
MetricName = Literal["ttft_s", "tpot_s", "e2e_s", "queue_s"]
_ALL_TIERS: tuple[TierName, ...] = ("short", "medium", "long")
_AB_METRICS: tuple[MetricName, ...] = ("ttft_s", "tpot_s", "e2e_s")


class QualityCheckpoint(StrictModel):
    """A check on the output of timed requests (the same requests that are measured).

    ``prompt_sha256`` names the de-identified sample prompt; the text itself is supplied at run
    time (``prompt_file``) and never written to the result unless ``--keep-prompts``.
    """

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: CheckKind
    tiers: list[TierName] = Field(default_factory=lambda: list(_ALL_TIERS))
    prompt_file: str | None = Field(default=None, description="prompt text file (kept private)")
    prompt_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    expected: str | None = Field(default=None, description="exact answer / needle answer")
    pattern: str | None = Field(default=None, description="regex (kind regex or refusal)")
    json_schema: dict[str, Any] | None = Field(default=None, description="kind json_schema")
    distance_tokens: int | None = Field(
        default=None, ge=1, description="needle: tokens between the needle and the question"
    )
    tool_name: str | None = None
    tool_arguments: dict[str, Any] | None = None
    should_refuse: bool | None = Field(default=None, description="refusal boundary side")

    @model_validator(mode="after")
    def _check(self) -> QualityCheckpoint:
        needs: dict[str, tuple[str, ...]] = {
            "exact": ("expected",),
            "regex": ("pattern",),
            "json_schema": ("json_schema",),
            "needle": ("expected", "distance_tokens"),
            "tool_call": ("tool_name", "tool_arguments"),
            "refusal": ("should_refuse",),
        }
        for name in needs[self.kind]:
            if getattr(self, name) is None:
                raise field_error(f"{name}", f"quality checkpoint kind '{self.kind}' needs {name}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise field_error("pattern", f"not a valid regular expression ({exc})") from None
        if self.json_schema is not None:
            from jsonschema.exceptions import SchemaError
            from jsonschema.validators import validator_for

            try:
                validator_for(self.json_schema).check_schema(self.json_schema)
            except SchemaError as exc:
                raise field_error(
                    "json_schema", f"not a valid JSON Schema ({exc.message})"
                ) from None
        return self


class PercentileCeilings(StrictModel):
    p50: float | None = Field(default=None, gt=0)
    p90: float | None = Field(default=None, gt=0)
    p95: float | None = Field(default=None, gt=0)
    p99: float | None = Field(default=None, gt=0)

    def items(self) -> list[tuple[str, float]]:
        return [(k, v) for k, v in self.model_dump().items() if v is not None]


#: host-tier ceiling applied when a cpu tier is configured and no ceiling is declared
DEFAULT_HOST_MEMORY_MAX_FRACTION = 0.95


class StopConditions(StrictModel):
    """Declared ceilings; any one crossed blocks the overall verdict."""

    ttft_s: PercentileCeilings = Field(default_factory=PercentileCeilings)
    tpot_s: PercentileCeilings = Field(default_factory=PercentileCeilings)
    error_rate_max: float = Field(default=0.01, ge=0, le=1)
    any_oom: bool = True
    any_quality_failure: bool = True
    any_cross_tenant_hit: bool = True
    host_memory_max_bytes: int | None = Field(
        default=None, ge=1, description="host (cpu) KV tier: peak bytes stored tolerated"
    )
    host_memory_max_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="host (cpu) KV tier: peak bytes stored / its capacity tolerated "
        f"(default {DEFAULT_HOST_MEMORY_MAX_FRACTION} when target.kv_tiers has a cpu tier)",
    )
    transfer_busy_max_fraction: float | None = Field(
        default=None, gt=0, description="KV tier link: busy time / cell duration tolerated"
    )
    transfer_stall_max_s: float | None = Field(
        default=None, gt=0, description="KV tier reloads: p95 wait for a busy link tolerated"
    )
    search_highest_load: bool = Field(
        default=False,
        description="after the cells, search each input tier's highest closed-loop concurrency "
        "meeting the latency ceilings and error_rate_max (kvbudget capacity's search; reported, "
        "no verdict)",
    )
    search_highest_load_by: Literal["auto", "concurrency", "rate"] = Field(
        default="auto",
        description="with search_highest_load: concurrency (closed loop only), rate (the "
        "concurrency search, then the highest Poisson request rate, bracketed from the "
        "requests/s the concurrency probes completed and bisected, as kvbudget capacity does), "
        "or auto (rate too when a concurrency tier is open loop: poisson or constant)",
    )

    @model_validator(mode="after")
    def _check(self) -> StopConditions:
        if not self.ttft_s.items() and not self.tpot_s.items():
            raise field_error(
                "ttft_s",
                "declare at least one TTFT or TPOT percentile ceiling "
                "(e.g. ttft_s: {p95: 2.0}) before the run",
            )
        return self


Factor = Literal[
    "kv_dtype", "block_size", "prefix_caching", "max_model_len", "offload", "router_policy"
]

#: which lock field each declared factor is allowed to change
FACTOR_LOCK_FIELD: dict[str, str] = {
    "kv_dtype": "kv_dtype",
    "block_size": "block_size",
    "prefix_caching": "prefix_caching",
    "max_model_len": "max_model_len",
    "offload": "offload",
    "router_policy": "router_policy",
}


class Comparison(StrictModel):
    """Baseline (the plan's lock) vs a variant that should differ in exactly one factor."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    factor: Factor
    set: dict[str, Any] = Field(
        description="lock overrides for the variant, e.g. {kv_dtype: fp8}; touching any field "
        "other than the factor's makes the comparison not_comparable"
    )
    cells: list[str] | None = Field(
        default=None, description="cells to compare ('input/concurrency'); default all nine"
    )
    metrics: list[MetricName] = Field(default_factory=lambda: list(_AB_METRICS))
    percentile: float = Field(default=95.0, gt=0, lt=100)
    alpha: float = Field(default=0.05, gt=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> Comparison:
        if FACTOR_LOCK_FIELD[self.factor] not in self.set:
            raise field_error(
                "set",
                f"factor '{self.factor}' must be set for the variant "
                f"(e.g. set: {{{FACTOR_LOCK_FIELD[self.factor]}: ...}})",
            )
        return self


class RollbackDrill(StrictModel):
    """How to restart the baseline target for a rollback drill (``accept.drill``).

    ``command`` starts the previous release on this host (``kvbudget serve``, llama-server,
    vLLM on CPU); ``{port}`` in it and in ``base_url`` becomes a free loopback port. The drill
    measures the time to ready (health 200) and to the first successful requests, then stops
    the process by its PID.
    """

    command: list[str] = Field(min_length=1, description="baseline launch argv; {port} = free port")
    base_url: str = Field(default="http://127.0.0.1:{port}", description="where it listens")
    health_path: str = Field(default="/health")
    served_model: str | None = Field(default=None, description="model name (default lock.model.id)")
    num_requests: int = Field(default=3, ge=1, le=100, description="successful requests needed")
    max_tokens: int = Field(default=4, ge=1)


class Rollback(StrictModel):
    """The rollback package (seed: 上线后的监控与回滚)."""

    previous_release: str | None = Field(default=None, description="release/image to return to")
    previous_flags: list[str] = Field(default_factory=list)
    previous_kv_dtype: str | None = None
    max_restore_s: float = Field(default=900, gt=0, description="target time to restore")
    weights_offline_copy: bool = Field(
        default=False, description="weights available without re-download"
    )
    drill_done: bool = Field(default=False, description="a rollback drill has been run")
    drill: RollbackDrill | None = Field(
        default=None,
        description="restart the baseline and measure it: a failed drill, or one slower than "
        "max_restore_s, blocks the overall verdict",
    )


class Canary(StrictModel):
    traffic_fraction: float = Field(default=0.05, gt=0, le=0.5)
    observation_window_s: float = Field(default=3600, gt=0)
    sample_source: str = Field(
        default="internal samples / explicitly allowed test traffic",
        description="never synthetic clicks or users in disguise",
    )


class TargetPlan(StrictModel):
    kind: Literal["sim", "serve", "http"] = "sim"
    base_url: str | None = Field(default=None, description="http: OpenAI-compatible base URL")
    metrics_url: str | None = None
    served_model: str | None = Field(default=None, description="http: model name to request")
    api_key_env: str | None = Field(
        default=None, description="environment variable holding the API key (never written)"
    )
    timing_model: Literal["roofline", "calibrated"] = "roofline"
    profile: str | None = Field(default=None, description="calibrated step-time profile JSON")
    request_timeout_s: float = Field(default=120, gt=0)
    speedup: float = Field(
        default=1.0, gt=0, description="serve: run the simulated clock this many times faster"
    )
    kv_tiers: list[TierConfig] = Field(
        default_factory=list,
        description="sim: KV tiers below the GPU (cpu, disk, remote), the simulator's tier model",
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=64,
        description="sim: identical replicas behind the simulator's router (lock.router_policy, "
        "default round_robin); serve and http are one endpoint",
    )

    @model_validator(mode="after")
    def _check(self) -> TargetPlan:
        if self.kind == "http" and not self.base_url:
            raise field_error(
                "base_url", "target kind 'http' needs base_url (e.g. http://127.0.0.1:8000)"
            )
        if self.timing_model == "calibrated" and not self.profile:
            raise field_error("profile", "timing_model 'calibrated' needs profile (a JSON file)")
        if self.kv_tiers and self.kind != "sim":
            raise field_error(
                "kv_tiers",
                f"only target kind 'sim' simulates KV tiers (got kind {self.kind!r}); "
                "remove kv_tiers or use kind: sim",
            )
        if self.replicas > 1 and self.kind != "sim":
            raise field_error(
                "replicas",
                f"only target kind 'sim' runs several replicas (got kind "
                f"{self.kind!r}, one endpoint); set replicas: 1, or use kind: sim",
            )
        if self.replicas > 1 and self.kv_tiers:
            raise field_error(
                "replicas",
                "KV tiers are metered on one replica; remove kv_tiers or set replicas: 1",
            )
        names = [t.name for t in self.kv_tiers]
        if len(set(names)) != len(names):
            raise field_error("kv_tiers", f"each tier name may appear once (got {names})")
        return self


class Audits(StrictModel):
    isolation: bool = False
    reuse: bool = False
    #: a persistent KV store across a restart and an upgrade (simulated only: kvbudget.audit.restart)
    restart: bool = False
