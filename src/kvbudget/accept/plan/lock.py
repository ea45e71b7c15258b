"""The object lock of an acceptance plan (seed step 1: "锁定对象").

Every locked fact is a :class:`Locked` value with a ``status``:

``confirmed``
    read back from the running system (engine startup log, ``/version``, ``nvidia-smi``, the
    simulator's own configuration) or computed by kvbudget from a file it hashed;
``requested``
    the intent (a launch flag, a plan entry) with no confirmation that it took effect
    ("请求值，未确认生效");
``unconfirmed``
    not known;
``not_applicable``
    meaningless for this target (e.g. a GPU driver for a simulated GPU), with a note.

A bare YAML scalar is read as ``requested``. Anything that is neither ``confirmed`` nor
``not_applicable`` goes to the blocking list shown at the top of the report.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from kvbudget.accept.plan.errors import field_error
from kvbudget.safety.limits import MAX_CONCURRENCY, MAX_TOKENS

LockStatus = Literal["confirmed", "requested", "unconfirmed", "not_applicable"]
T = TypeVar("T")


class StrictModel(BaseModel):
    """Base of every plan-file model: unknown keys are errors, values are immutable, numbers are
    finite (a YAML `.inf` or `.nan` ceiling is refused, not read as "no limit")."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Locked(StrictModel, Generic[T]):
    """One locked fact: its value, where it was read, and whether it is confirmed."""

    value: T | None = None
    source: str | None = Field(default=None, description="where the value was read or how derived")
    status: LockStatus = "requested"
    note: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _scalar_is_requested(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("value") is None and "status" not in data:
                return {**data, "status": "unconfirmed"}
            return data
        if data is None:
            return {"value": None, "status": "unconfirmed"}
        return {"value": data, "status": "requested"}

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """A locked field is written either as ``{value, source, status, note}`` or bare."""
        json_schema = handler(core_schema)
        resolved = handler.resolve_ref_schema(json_schema)
        value_schema = dict(resolved.get("properties", {}).get("value", {}))
        value_schema.pop("default", None)
        value_schema["title"] = "bare value (status: requested)"
        return {"anyOf": [json_schema, value_schema]}

    @model_validator(mode="after")
    def _confirmed_needs_value(self) -> Locked[T]:
        if self.status == "confirmed" and self.value is None:
            raise field_error(
                "status",
                "'confirmed' needs a value (got none); give the value or mark it unconfirmed",
            )
        return self


def _unconfirmed() -> Any:
    return Locked[Any]()


class ModelLock(StrictModel):
    id: str = Field(description="catalog id (e.g. meta-llama/Llama-3.1-8B) or path to config.json")
    revision: Locked[str] = Field(default_factory=_unconfirmed)
    config_sha256: Locked[str] = Field(
        default_factory=_unconfirmed,
        description="sha256 of config.json; 'auto' lets kvbudget hash the resolved config",
    )


class EngineLock(StrictModel):
    name: Locked[str] = Field(default_factory=_unconfirmed)
    version: Locked[str] = Field(default_factory=_unconfirmed)
    container: Locked[str] = Field(default_factory=_unconfirmed)
    flags: Locked[list[str]] = Field(default_factory=_unconfirmed)


class GpuLock(StrictModel):
    type: Locked[str] = Field(default_factory=_unconfirmed, description="GPU catalog name")
    count: Locked[int] = Field(default_factory=_unconfirmed)
    driver: Locked[str] = Field(default_factory=_unconfirmed)


class PrefixCachingPolicy(StrictModel):
    enabled: bool = True
    salt: Literal["none", "per-tenant", "user-supplied"] = Field(
        default="per-tenant", description="how cache_salt separates tenants (trust groups)"
    )


#: the lock's integer fields and their upper bounds (docs/limits.md)
_INT_BOUNDS: dict[str, int] = {
    "tensor_parallel": 4096,
    "pipeline_parallel": 4096,
    "max_model_len": MAX_TOKENS,
    "block_size": 1 << 20,
    "max_num_seqs": MAX_CONCURRENCY,
    "max_num_batched_tokens": MAX_TOKENS,
}


class ObjectLock(StrictModel):
    """What the acceptance result applies to; the result is valid only for this lock."""

    model: ModelLock
    engine: EngineLock = Field(default_factory=EngineLock)
    gpu: GpuLock = Field(default_factory=GpuLock)
    tensor_parallel: Locked[int] = Field(default_factory=lambda: Locked[int](value=1))
    pipeline_parallel: Locked[int] = Field(default_factory=lambda: Locked[int](value=1))
    kv_dtype: Locked[str] = Field(default_factory=lambda: Locked[str](value="auto"))
    max_model_len: Locked[int] = Field(default_factory=_unconfirmed)
    block_size: Locked[int] = Field(default_factory=lambda: Locked[int](value=16))
    prefix_caching: Locked[PrefixCachingPolicy] = Field(
        default_factory=lambda: Locked[PrefixCachingPolicy](value=PrefixCachingPolicy())
    )
    gpu_memory_utilization: Locked[float] = Field(default_factory=lambda: Locked[float](value=0.9))
    max_num_seqs: Locked[int] = Field(default_factory=lambda: Locked[int](value=256))
    max_num_batched_tokens: Locked[int] = Field(default_factory=lambda: Locked[int](value=8192))
    offload: Locked[str] = Field(
        default_factory=_unconfirmed,
        description="KV offload below the GPU: none or cpu:SIZE (e.g. cpu:64GiB); not given: "
        "the target's own (sim: target.kv_tiers)",
    )
    #: vLLM --kv-cache-memory-bytes (on the CPU build: VLLM_CPU_KVCACHE_SPACE GiB); only when set
    kv_cache_memory_bytes: Locked[int] | None = Field(
        default=None,
        description="KV pool bytes per GPU instead of a fraction of device memory (vLLM "
        "--kv-cache-memory-bytes; the CPU build's VLLM_CPU_KVCACHE_SPACE); omit when unused",
    )
    #: vLLM --quantization of the weights; only when set (else the config's quantization_config)
    quantization: Locked[str] | None = Field(
        default=None,
        description="vLLM --quantization of the weights (fp8, awq, gptq, mxfp4, modelopt, modelopt_fp4); omit for the "
        "checkpoint's own quantization_config",
    )
    #: vLLM --async-scheduling (true) / --no-async-scheduling (false); only when set (else the
    #: engine version's default, kvbudget.capacity.versions.vllm_async_scheduling)
    async_scheduling: Locked[bool] | None = Field(
        default=None,
        description="vLLM --async-scheduling (true) / --no-async-scheduling (false); omit for "
        "the engine version's default (off up to 0.13.0, on from 0.14.0)",
    )
    #: vLLM --num-gpu-blocks-override; only when set
    num_gpu_blocks_override: Locked[int] | None = Field(
        default=None, description="vLLM --num-gpu-blocks-override; omit when unused"
    )
    router_policy: Locked[str] = Field(
        default_factory=_unconfirmed,
        description="router policy when more than one replica serves the model (sim with "
        "target.replicas >= 2: a kvbudget.sim.router policy, default round_robin; not given: "
        "the deployment's own)",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_booleans(cls, data: Any) -> Any:
        """``max_model_len: true`` is not 1: integers must be written as integers."""
        if isinstance(data, dict):
            for name in _INT_BOUNDS:
                raw = data.get(name)
                value = raw.get("value") if isinstance(raw, dict) else raw
                if isinstance(value, bool):
                    raise field_error(
                        f"{name}", f"expected an integer, got {value!r}; give a positive integer"
                    )
        return data

    @model_validator(mode="after")
    def _positive(self) -> ObjectLock:
        for name, bound in _INT_BOUNDS.items():
            locked = getattr(self, name)
            if locked.value is not None and not 1 <= locked.value <= bound:
                raise field_error(
                    f"{name}",
                    f"must be >= 1 and <= {bound:,} (got {locked.value}); give a "
                    "positive integer (docs/limits.md)",
                )
        util = self.gpu_memory_utilization.value
        if util is not None and not 0.0 < util <= 1.0:
            raise field_error(
                "gpu_memory_utilization", f"must be in (0, 1] (got {util}); vLLM's default is 0.9"
            )
        return self


def flatten_lock(lock: ObjectLock) -> dict[str, Locked[Any]]:
    """The lock as ``{"model.revision": Locked, ...}`` in declaration order (model.id included)."""
    out: dict[str, Locked[Any]] = {
        "model.id": Locked[str](value=lock.model.id, status="requested", source="plan file")
    }
    for name in type(lock).model_fields:
        value = getattr(lock, name)
        if isinstance(value, Locked):
            out[name] = value
        elif isinstance(value, BaseModel):
            for sub in type(value).model_fields:
                item = getattr(value, sub)
                if isinstance(item, Locked):
                    out[f"{name}.{sub}"] = item
    return out


def given_fields(lock: ObjectLock) -> set[str]:
    """The flattened lock fields the plan file wrote (the rest are schema defaults)."""
    out = {"model.id"}
    for name in lock.model_fields_set:
        value = getattr(lock, name)
        if isinstance(value, Locked):
            out.add(name)
        elif isinstance(value, BaseModel):
            out |= {f"{name}.{sub}" for sub in value.model_fields_set}
    return out


def lock_value(value: Any) -> Any:
    """A lock value as plain JSON data (policies become dicts)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value
