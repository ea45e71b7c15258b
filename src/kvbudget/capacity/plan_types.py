"""``PlanRequest`` (input, pydantic) and ``PlanResult`` (output, frozen): the plan's contract.

The simulator builds a replica from a :class:`PlanResult` (one source of truth): its block pool
has ``num_blocks`` blocks (block 0 is the null block) of ``block_size`` tokens in each of
``groups``; a sequence of ``n`` tokens holds ``blocks_for_tokens(n)`` blocks; the scheduler
uses ``max_num_batched_tokens`` and ``max_num_seqs``; the timing model reads ``gpu`` and
``weights``. Every figure here is ``computed`` (arithmetic), never measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeAlias

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from kvbudget.capacity.memory import RankMemory
from kvbudget.capacity.pool import KvCacheGroup, MambaCacheMode
from kvbudget.capacity.sglang_pool import SglangPool
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.engine_name import NameChoices
from kvbudget.spec.hardware import GpuSpec
from kvbudget.spec.layer_indices import MAX_SPELLED_OUT_LAYERS, LayerIndices
from kvbudget.units import GiB, cdiv


def _planned_engines() -> tuple[str, ...]:
    from kvbudget.capacity.engines.registry import planned_engines

    return planned_engines()


def _check_planned(name: str) -> str:
    """``name`` if a registered engine's planner plans it, else a one-line refusal (pydantic
    names the field ``engine`` and the value before it)."""
    from kvbudget.capacity.engines.registry import planned_engine

    if planned_engine(name) is None:
        raise ValueError(
            f"{name!r} is no engine kvbudget plans; choose one of {', '.join(_planned_engines())}"
        )
    return name


#: an engine whose pool ``make_plan`` models: one registered in ``capacity/engines/`` with a
#: planner (llama.cpp's slots are no block pool to plan); checked where a request is validated
Engine: TypeAlias = Annotated[str, AfterValidator(_check_planned), NameChoices(_planned_engines)]


def planned_engine(name: str) -> str | None:
    """``name`` as an engine ``make_plan`` models, or ``None`` (``llamacpp``, the ``hf`` layout)."""
    from kvbudget.capacity.engines.registry import planned_engine as registered

    return registered(name)


def request_snapshot(request: PlanRequest) -> Path | None:
    """The snapshot folder whose weights index a plan reads: ``--snapshot``, else ``--model`` when
    it is a folder."""
    if request.snapshot:
        return Path(request.snapshot)
    return Path(request.model) if Path(request.model).is_dir() else None


class PlanRequest(BaseModel):
    """What to plan. Sizes are bytes; ``None`` means "use the engine's default / estimate"."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Catalog id, config.json path or snapshot directory.")
    gpu: str | None = Field(
        default=None, description="GPU from the catalog (see 'kvbudget gpus'), e.g. H100, L40S."
    )
    gpu_memory_bytes: int | None = Field(
        default=None,
        gt=0,
        description="Device memory per GPU, e.g. 80GiB (replaces the catalog value).",
        json_schema_extra={"cli": {"flags": ["--gpu-memory"]}},
    )
    gpu_bf16_tflops: float | None = Field(
        default=None, gt=0, description="Custom device: dense BF16 TFLOPS."
    )
    gpu_bandwidth_gb_s: float | None = Field(
        default=None,
        gt=0,
        description="Custom device: memory bandwidth in GB/s.",
        json_schema_extra={"cli": {"flags": ["--gpu-bandwidth"]}},
    )
    tp: int = Field(default=1, ge=1, description="Tensor-parallel size (default 1).")
    pp: int = Field(default=1, ge=1)
    async_scheduling: bool | None = Field(
        default=None,
        description=(
            "vLLM --async-scheduling (True) / --no-async-scheduling (False); None: the "
            "version's default on a GPU (the CPU build schedules synchronously)"
        ),
        json_schema_extra={
            "cli": {
                "help_suffix": " In plan: a sliding-window or chunked-local group reserves for 2 "
                "batches in flight with it on a GPU from vLLM 0.26.0 (max_in_flight_tokens); "
                "the CPU build keeps it off."
            }
        },
    )
    data_parallel_size: int = Field(
        default=1,
        ge=1,
        description=(
            "vLLM --data-parallel-size: engines of tp x pp GPUs each, every one with its own "
            "KV pool (this plan is one of them); a MoE layer's experts span all dp x tp GPUs"
        ),
    )
    engine: Engine = Field(default="vllm", description="Engine whose pool to model (default vllm).")
    engine_version: str | None = None
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="vLLM fraction of total device memory (default 0.9).",
    )
    kv_cache_memory_bytes: int | None = Field(
        default=None,
        ge=0,
        description="vLLM --kv-cache-memory-bytes: KV bytes per GPU, e.g. 20GiB; overrides "
        "utilization (SGLang: the rest memory for the pool).",
        json_schema_extra={"cli": {"flags": ["--kv-cache-memory", "--kv-cache-memory-bytes"]}},
    )
    max_model_len: int | None = Field(
        default=None,
        ge=1,
        description="Max tokens per request (default: the config's max_position_embeddings); "
        "'auto' = vLLM's -1 auto-fit.",
        json_schema_extra={
            "cli": {"words": {"auto": "auto_fit_max_model_len", "-1": "auto_fit_max_model_len"}}
        },
    )
    auto_fit_max_model_len: bool = Field(
        default=False,
        description="vLLM max_model_len=-1: shrink to the longest length that fits",
        json_schema_extra={"cli": {"flags": []}},  # --max-model-len auto
    )
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="Tokens per step (default by device, vLLM §3.4)."
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, description="Max running sequences (SGLang: max_running_requests)."
    )
    kv_dtype: str = "auto"
    block_size: int | None = Field(
        default=None,
        ge=1,
        description="Tokens per block (vLLM default 16; MLA 64; MiniMax-M3 128).",
    )
    weights_bytes: int | None = Field(
        default=None, ge=0, description="Weights per GPU from an engine log, e.g. 27.72GiB."
    )
    activation_bytes: int | None = Field(
        default=None, ge=0, description="Peak activation per GPU from an engine log."
    )
    non_torch_bytes: int | None = Field(
        default=None, ge=0, description="Non-torch memory per GPU from an engine log."
    )
    cudagraph_bytes: int | None = Field(
        default=None, ge=0, description="CUDA-graph memory per GPU from an engine log."
    )
    enforce_eager: bool = Field(
        default=False,
        description="vLLM flag: no CUDA graphs, so no graph memory is taken from the KV budget.",
    )
    snapshot: str | None = Field(
        default=None,
        description="Model snapshot directory: weights from model.safetensors.index.json.",
    )
    api_server: bool = Field(
        default=True,
        description="vllm serve defaults (False: LLM class)",
        json_schema_extra={
            "cli": {
                "flags": ["--llm-class"],
                "help": "Use the LLM-class batch defaults instead of 'vllm serve'.",
            }
        },
    )
    mamba_cache_mode: MambaCacheMode | None = Field(
        default=None,
        description="vLLM mamba cache mode (default: align for an attention + state hybrid "
        "from vLLM 0.32, else none).",
    )
    mamba_cache_dtype: str = Field(
        default="auto",
        description="vLLM --mamba-cache-dtype: auto (model dtype), float32, bfloat16, float16 "
        "(default auto).",
    )
    mamba_ssm_cache_dtype: str = Field(
        default="auto",
        description="vLLM --mamba-ssm-cache-dtype for the recurrent state (auto follows "
        "--mamba-cache-dtype; vLLM's CPU build resets it to float32). With --engine sglang: "
        "SGLang's --mamba-ssm-dtype (auto: float32, SGLang's default).",
    )
    quantization: str | None = Field(
        default=None, description="vLLM --quantization method name for the weights"
    )
    dtype: str = Field(
        default="auto",
        description="vLLM --dtype of weights and activations; with --kv-dtype auto also the KV "
        "element (float32 doubles both). auto: the config's dtype, float32 configs served in "
        "bfloat16.",
        json_schema_extra={
            "cli": {"choices": ["auto", "half", "float16", "bfloat16", "float", "float32"]}
        },
    )
    speculative_config: str | None = Field(
        default=None,
        description='vLLM --speculative-config JSON; a draft model ({"model": ID, '
        '"num_speculative_tokens": K}) adds its weights and its KV layers to the pool; method '
        "mtp (DeepSeek-V3/V3.2/V4, GLM-5, GLM-4.5, MiMo, MiMo-V2-Flash, MiniMax-M3) adds the MTP "
        "layers' pages and the drafter's weights (under vLLM DeepSeek-V4's NVFP4 drafter experts "
        "refused; Qwen4-Exp: its QSA drafter layers' pages and, unquantized, its weights; "
        "Dots3-Note: its drafter layers' pages, weights from --weights-bytes); "
        "num_speculative_tokens as vLLM requires it; ngram / ngram_gpu add no KV (Qwen4-Exp: "
        "widened states and ring), but from vLLM 0.32 their GPU token buffers (max_num_seqs x "
        "max_model_len int32) join the non-KV memory. With --engine sglang method mtp is "
        "SGLang's NEXTN drafter for DeepSeek-V3/V3.2/V4, GLM-4.5 and GLM-5 by SGLang's own rules "
        "(0.5.23: its layer and weights in the target's budget, DeepSeek-V4's NVFP4 drafter "
        "experts left unsized with a note; 0.5.4: a raised pool, the draft outside it); other "
        "drafts refused.",
    )
    attention_config: str | None = Field(
        default=None,
        description="vLLM --attention-config JSON; kvbudget reads its indexer_kv_dtype only "
        "(Qwen4-Exp: bf16 or fp8 compressed index keys; other models refuse a value other than "
        "auto, and any other key is refused).",
    )
    allow_long_max_model_len: bool = Field(
        default=False,
        description="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: a max_model_len past the config's limit",
        json_schema_extra={"cli": {"flags": [], "env": "VLLM_ALLOW_LONG_MAX_MODEL_LEN"}},
    )
    disable_hybrid_kv_cache_manager: bool = Field(
        default=False,
        description="vLLM flag: sliding/chunked layers pay the full length (one group).",
    )
    num_gpu_blocks_override: int | None = Field(
        default=None, ge=1, description="vLLM --num-gpu-blocks-override (testing)."
    )
    mem_fraction_static: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="SGLang mem_fraction_static (default by version).",
    )
    page_size: int | None = Field(
        default=None, ge=1, description="SGLang page size in tokens (default 1)."
    )
    max_total_tokens: int | None = Field(
        default=None, ge=1, description="SGLang --max-total-tokens cap."
    )
    swa_full_tokens_ratio: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="SGLang hybrid SWA pool: sliding-window tokens per full-attention token "
        "(unset: SGLang's 0.8 where SGLang runs the hybrid pool by default, from 0.5.23 e.g. "
        "gpt-oss, Llama-4, MiMo-V2-Flash; else sliding layers count as full, and a given ratio is "
        "ignored with a note, as SGLang ignores it; Dots3-Note's pool is always split, 0.8 by "
        "default).",
    )
    headroom_fraction: float = Field(
        default=0.03,
        ge=0,
        lt=1,
        description="Device-peak margin as a fraction of device memory (default 0.03).",
    )


@dataclass(frozen=True, slots=True)
class PlanResult:
    """The engine's KV pool for one replica (TP x PP GPUs) and everything it was derived from."""

    model_id: str
    engine: Engine
    engine_version: str
    gpu: GpuSpec
    tp: int
    pp: int
    kv_dtype: str
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    groups: tuple[KvCacheGroup, ...]
    group_size: int
    num_padding_layers: int
    page_size_bytes: int
    num_blocks: int
    num_usable_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    available_kv_bytes: int
    fits: bool
    needed_bytes: int
    estimated_max_model_len: int | None
    error: str | None
    log_lines: tuple[str, ...]
    kv_bytes_per_token_per_rank: int
    kv_bytes_per_token_replica: int
    weights: WeightsEstimate
    ranks: tuple[RankMemory, ...]
    mamba_cache_mode: MambaCacheMode = "none"
    #: tokens scheduled but not yet settled, which a sliding-window or chunked-local group
    #: reserves for (vLLM 0.26+ ``max_in_flight_tokens``); ``None``: ``max_num_batched_tokens``
    max_in_flight_tokens: int | None = None
    sglang: SglangPool | None = None
    notes: tuple[str, ...] = ()
    remedies: tuple[str, ...] = ()
    figure: str = "computed"
    headroom_fraction: float = 0.03
    defaults_applied: dict[str, str] = field(default_factory=dict)
    #: False when ``--kv-cache-memory`` sized the pool without a device (no device peak)
    device_given: bool = True

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def weights_bytes(self) -> int:
        """Weights on the most loaded GPU."""
        return self.weights.max_rank_bytes

    @property
    def in_flight_tokens(self) -> int:
        """Tokens a window group reserves for beside its window (see ``max_in_flight_tokens``)."""
        return self.max_in_flight_tokens or self.max_num_batched_tokens

    def blocks_for_tokens(self, num_tokens: int) -> int:
        """Blocks one sequence of ``num_tokens`` holds across all groups (window-bounded)."""
        if _token_pool(self.engine):
            return cdiv(num_tokens, self.block_size) if num_tokens > 0 else 0
        return sum(
            g.blocks_for_tokens(num_tokens, self.in_flight_tokens, self.mamba_cache_mode)
            for g in self.groups
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "model": self.model_id,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "gpu": self.gpu.to_dict() if self.device_given else None,
            "device_given": self.device_given,
            "tp": self.tp,
            "pp": self.pp,
            "num_gpus": self.num_gpus,
            "kv_dtype": self.kv_dtype,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_in_flight_tokens": self.in_flight_tokens,
            "max_num_seqs": self.max_num_seqs,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "num_usable_blocks": self.num_usable_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "available_kv_bytes": self.available_kv_bytes,
            "available_kv_gib": round(self.available_kv_bytes / GiB, 2),
            "fits": self.fits,
            "needed_bytes": self.needed_bytes,
            "estimated_max_model_len": self.estimated_max_model_len,
            "error": self.error,
            "log_lines": list(self.log_lines),
            "page_size_bytes": self.page_size_bytes,
            "group_size": self.group_size,
            "num_padding_layers": self.num_padding_layers,
            "groups": [
                {
                    "group_id": g.group_id,
                    "kind": g.kind,
                    "num_layers": g.num_layers,
                    "layer_indices": list(g.layer_indices)
                    if g.num_layers <= MAX_SPELLED_OUT_LAYERS
                    else None,
                    "layer_ranges": LayerIndices.of(g.layer_indices).as_ranges(),
                    "num_padding_layers": g.num_padding_layers,
                    "block_size": g.block_size,
                    "page_size_bytes": g.page_size_bytes,
                    "sliding_window": g.sliding_window,
                    "attention_chunk_size": g.attention_chunk_size,
                }
                for g in self.groups
            ],
            "kv_bytes_per_token_per_rank": self.kv_bytes_per_token_per_rank,
            "kv_bytes_per_token_replica": self.kv_bytes_per_token_replica,
            "weights": {
                "total_bytes": self.weights.total_bytes,
                "per_rank_bytes": list(self.weights.per_rank_bytes),
                "source": self.weights.source,
                "method": self.weights.method,
                "num_params": self.weights.num_params,
                "quantization": self.weights.quantization,
                "notes": list(self.weights.notes),
            },
            "breakdown": [rank.to_dict() for rank in self.ranks],
            "mamba_cache_mode": self.mamba_cache_mode,
            "sglang": self.sglang.to_dict() if self.sglang else None,
            "headroom_fraction": self.headroom_fraction,
            "defaults_applied": dict(self.defaults_applied),
            "remedies": list(self.remedies),
            "notes": list(self.notes),
        }


def _token_pool(engine: str) -> bool:
    """One pool of pages for all layers (SGLang), as the engine registered it."""
    from kvbudget.capacity.engines.registry import engine_is

    return engine_is(engine, lambda e: e.token_pool)
