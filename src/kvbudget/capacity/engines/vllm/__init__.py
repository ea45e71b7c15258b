"""vLLM: its paged layout (``calc --engine vllm``) and its planner (``plan --engine vllm``).

The layout's arithmetic is ``capacity.layouts.vllm`` (layer specs, pages, groups); the plan is
:mod:`.settings` (defaults and memory terms) -> :mod:`.groups` -> :mod:`.planner` (per-stage
memory, blocks, log lines, fit check).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvbudget.capacity.checkpoint_mtp import without_mtp_tensors
from kvbudget.capacity.engines.registry import (
    LayoutLoad,
    RegisteredEngine,
    refuse_llamacpp_knobs,
    register_engine,
)
from kvbudget.capacity.engines.vllm.planner import make_vllm_plan
from kvbudget.capacity.engines.vllm.settings import (
    speculative_draft,
    with_draft_weights,
    with_ngram_buffers,
)
from kvbudget.capacity.engines.vllm.start import resolve_engine
from kvbudget.capacity.kv_checkpoint import CheckpointKv, vllm_checkpoint_kv
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.capacity.layouts.vllm_dsv4 import is_deepseek_v4
from kvbudget.capacity.layouts.vllm_dsv41 import is_deepseek_v41
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp
from kvbudget.capacity.moe_ranks import vllm_moe_ranks
from kvbudget.capacity.mtp_draft import MTP_SNAPSHOT_NOTE, MTP_WEIGHTS_NOTE
from kvbudget.capacity.plan_types import request_snapshot
from kvbudget.capacity.pool_dsv41 import check_dsv41_device, check_dsv41_request
from kvbudget.capacity.pool_text import format_gib_new
from kvbudget.capacity.versions import (
    DEFAULT_VLLM_VERSION,
    VLLM_KV_DTYPE_SINCE,
    format_version,
    parse_version,
)
from kvbudget.capacity.weights import with_rope_cache
from kvbudget.capacity.weights_dsv4 import deepseek_v4_weights
from kvbudget.capacity.weights_qwen4 import qwen4_exp_weights

if TYPE_CHECKING:
    from kvbudget.capacity.layouts.base import LayoutResult
    from kvbudget.capacity.plan_types import PlanRequest, PlanResult
    from kvbudget.capacity.weights import WeightsEstimate
    from kvbudget.spec.hardware import GpuSpec
    from kvbudget.spec.model import ModelSpec

#: SGLang's knobs, which a vLLM plan ignores (with a note)
SGLANG_ONLY = ("mem_fraction_static", "page_size", "max_total_tokens", "swa_full_tokens_ratio")


def layout(spec: ModelSpec, load: LayoutLoad) -> LayoutResult:
    refuse_llamacpp_knobs(load, "vllm")
    return vllm_layout(
        spec,
        tokens=load.tokens,
        seqs=load.seqs,
        kv_dtype=load.kv_dtype,
        tp=load.tp,
        pp=load.pp,
        dp=load.dp,
        block_size=load.block_size,
    )


def checkpoint_kv(spec: ModelSpec, kv_dtype: str) -> CheckpointKv | None:
    """``calc``'s vLLM: the default version's ``auto`` on a KV-quantized checkpoint."""
    return vllm_checkpoint_kv(spec, kv_dtype, parse_version(DEFAULT_VLLM_VERSION))


class VllmPlanner:
    """vLLM's pool: sized by ``--kv-cache-memory`` alone when no device is given."""

    pool_without_device = True

    def check_request(self, request: PlanRequest) -> None:
        """vLLM plans every request ``PlanRequest`` accepts (``--data-parallel-size`` included)."""

    def plan(
        self,
        request: PlanRequest,
        model: ModelSpec,
        gpu: GpuSpec,
        weights: WeightsEstimate,
        max_model_len: int,
        device_given: bool,
    ) -> PlanResult:
        """The rotary cache and a draft model join the weights; ``--max-model-len auto`` plans
        again at the longest length that fits (vLLM's ``max_model_len=-1``)."""
        if is_deepseek_v41(model):  # refused before DeepSeek-V4's drafters and modules
            version = parse_version(request.engine_version or DEFAULT_VLLM_VERSION)
            check_dsv41_request(request, version)
            check_dsv41_device(gpu, device_given)
        draft = speculative_draft(request, model, gpu)
        snapshot = request_snapshot(request)
        if snapshot is not None and (draft is None or not draft.is_mtp):
            weights = without_mtp_tensors(weights, snapshot, model)  # vLLM skips them
        dsv4 = is_deepseek_v4(model) and not is_deepseek_v41(model)
        if dsv4 or is_qwen4_exp(model):  # priced module by module, as vLLM builds them
            shape: dict[str, int] = {
                "tp": request.tp,
                "pp": request.pp,
                "moe_ranks": vllm_moe_ranks(request, model) or request.tp,
                "max_num_batched_tokens": resolve_engine(
                    request, model, gpu, max_model_len, device_given
                ).max_num_batched_tokens,
            }
        if dsv4:  # its modules, rotary caches, top-k buffer
            weights = deepseek_v4_weights(
                weights,
                model,
                **shape,
                compute_capability_major=gpu.compute_capability_major,
                measured=request.kv_cache_memory_bytes is not None,
            )
        elif is_qwen4_exp(model):  # hyper-connections, QSA indexers, PLE layers, top-k buffers
            weights = qwen4_exp_weights(
                weights,
                model,
                **shape,
                # a snapshot holds the drafter; else its hidden buffer comes with its weights
                mtp=draft is not None and draft.is_mtp and weights.source == "read",
            )
        else:
            weights = with_rope_cache(weights, model)
        # an MTP drafter's weights are already in an engine log's figure (flag) and in a
        # snapshot's total_size (read: the checkpoint ships the MTP layers' tensors)
        held = draft is not None and draft.is_mtp and weights.source in ("flag", "read")
        if draft is not None and draft.weights_bytes and not held:
            engine = resolve_engine(request, model, gpu, max_model_len, device_given)
            weights = with_draft_weights(weights, draft, request.tp, engine.max_num_batched_tokens)
        elif draft is not None and not held:  # an MTP drafter mtp_draft does not size
            weights = replace(weights, notes=(*weights.notes, MTP_WEIGHTS_NOTE))
        if held and weights.source == "read":
            weights = replace(weights, notes=(*weights.notes, MTP_SNAPSHOT_NOTE))
        if request.speculative_config is not None:  # ngram / ngram_gpu: 0.32's GPU buffers
            engine = resolve_engine(request, model, gpu, max_model_len, device_given)
            weights = with_ngram_buffers(weights, request, engine.max_num_seqs, max_model_len)
        extra = draft.block_bytes if draft is not None else 0
        result = make_vllm_plan(request, model, gpu, weights, max_model_len, device_given, extra)
        if request.auto_fit_max_model_len and not result.fits and result.estimated_max_model_len:
            fitted = result.estimated_max_model_len
            line = (
                f"Auto-fit max_model_len: reduced from {max_model_len} to {fitted} to fit in available "
                f"GPU memory ({format_gib_new(result.available_kv_bytes)} GiB available for KV cache)"
            )
            again = make_vllm_plan(request, model, gpu, weights, fitted, device_given, extra)
            result = replace(again, log_lines=(line, *again.log_lines))
        return result

    def flag_conflicts(self, request: PlanRequest) -> list[tuple[str, str]]:
        return [
            (name, f"{name}: an SGLang knob, ignored with --engine vllm (pass --engine sglang)")
            for name in SGLANG_ONLY
            if getattr(request, name) is not None
        ]


ENGINE = register_engine(
    RegisteredEngine(
        "vllm",
        layout,
        VllmPlanner(),
        listed_at=1,
        has_blocks=True,
        picks_kv_dtype=True,
        auto_fit=True,
        utilization_flag=True,
        cpu_build=True,
        group_blocks=True,
        # vLLM 0.32 CacheConfig: block_size 16 on CUDA (128 on the CPU backend),
        # prefix_caching_hash_algo "sha256"
        prefix_layout=("16", "sha256"),
        label="vLLM",
        default_version=DEFAULT_VLLM_VERSION,
        kv_dtype_since={name: format_version(v) for name, v in VLLM_KV_DTYPE_SINCE.items()},
        checkpoint_kv=checkpoint_kv,
    )
)
