"""SGLang: its token pool's layout (``calc --engine sglang``) and planner (``plan --engine sglang``).

The layout's arithmetic is ``capacity.layouts.sglang``; the plan is :mod:`.planner` over
``capacity.sglang_pool``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.capacity.engines.registry import (
    LayoutLoad,
    PoolWording,
    RegisteredEngine,
    refuse_block_size,
    refuse_llamacpp_knobs,
    register_engine,
)
from kvbudget.capacity.engines.sglang.dots3 import DOTS3_SGLANG_VERSION
from kvbudget.capacity.engines.sglang.dsv4_weights import sglang_dsv4_weights
from kvbudget.capacity.engines.sglang.planner import make_sglang_plan
from kvbudget.capacity.engines.sglang.qwen4 import QWEN4_SGLANG_VERSION
from kvbudget.capacity.engines.sglang.setup import plain_checkpoint_kv
from kvbudget.capacity.layouts.base import PpSplit, sglang_pp_split
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.layouts.sglang_dots3 import is_sglang_dots3
from kvbudget.capacity.layouts.sglang_dsv4 import is_sglang_dsv4
from kvbudget.capacity.layouts.sglang_qwen4 import is_sglang_qwen4
from kvbudget.capacity.versions import DEFAULT_SGLANG_VERSION, parse_version
from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.capacity.kv_checkpoint import CheckpointKv
    from kvbudget.capacity.layouts.base import LayoutResult
    from kvbudget.capacity.plan_types import PlanRequest, PlanResult
    from kvbudget.capacity.weights import WeightsEstimate
    from kvbudget.spec.hardware import GpuSpec
    from kvbudget.spec.model import ModelSpec

#: vLLM's knobs, which an SGLang plan ignores (with a note)
VLLM_ONLY = (
    "gpu_memory_utilization",
    "num_gpu_blocks_override",
    "disable_hybrid_kv_cache_manager",
    "enforce_eager",
    "auto_fit_max_model_len",  # --max-model-len auto: vLLM's -1 auto-fit; SGLang has none
)


def layout(spec: ModelSpec, load: LayoutLoad) -> LayoutResult:
    refuse_llamacpp_knobs(load, "sglang")
    refuse_block_size(load, "sglang")
    return sglang_layout(
        spec,
        tokens=load.tokens,
        seqs=load.seqs,
        kv_dtype=load.kv_dtype,
        tp=load.tp,
        pp=load.pp,
        dp=load.dp,
    )


def checkpoint_kv(spec: ModelSpec, kv_dtype: str) -> CheckpointKv | None:
    """``calc``'s SGLang: the default version's ``auto`` on a KV-quantized checkpoint."""
    return plain_checkpoint_kv(spec, kv_dtype, parse_version(DEFAULT_SGLANG_VERSION))


class SglangPlanner:
    """SGLang's pool: sized from the device's memory, even with ``--kv-cache-memory``."""

    pool_without_device = False

    def check_request(self, request: PlanRequest) -> None:
        dp = request.data_parallel_size
        if dp > 1:
            raise ConfigError(
                f"data_parallel_size: {dp} is planned for vLLM only (--data-parallel-size); SGLang's "
                "--dp-size with DP attention shares one pool differently; plan SGLang with 1",
                field="data_parallel_size",
            )

    def plan(
        self,
        request: PlanRequest,
        model: ModelSpec,
        gpu: GpuSpec,
        weights: WeightsEstimate,
        max_model_len: int,
        device_given: bool,
    ) -> PlanResult:
        """DeepSeek-V4's target weights are SGLang's own modules (``dsv4_weights``)."""
        if is_sglang_dsv4(model):
            weights = sglang_dsv4_weights(
                weights,
                model,
                tp=request.tp,
                pp=request.pp,
                split=self.pp_split(request, model),
                compute_capability_major=gpu.compute_capability_major,
            )
        return make_sglang_plan(request, model, gpu, weights, max_model_len)

    def pp_split(self, request: PlanRequest, model: ModelSpec) -> PpSplit:
        """SGLang's ``get_pp_indices`` at the version planned (``layouts.base.sglang_pp_split``),
        for the weights of each stage; the pool's stages use the same (``setup.SglangSetup``)."""
        if request.engine_version is not None:
            version = parse_version(request.engine_version)
        elif is_sglang_dots3(model):
            version = parse_version(DOTS3_SGLANG_VERSION)
        elif is_sglang_qwen4(model):
            version = parse_version(QWEN4_SGLANG_VERSION)
        else:
            version = parse_version(DEFAULT_SGLANG_VERSION)
        return sglang_pp_split(version)

    def flag_conflicts(self, request: PlanRequest) -> list[tuple[str, str]]:
        out = [
            (name, f"{name}: a vLLM knob, ignored with --engine sglang (use --mem-fraction-static)")
            for name in VLLM_ONLY
            if getattr(request, name) not in (None, False)
        ]
        if request.attention_config is not None:
            out.append(
                (
                    "attention_config",
                    "attention_config: vLLM's --attention-config, ignored with --engine sglang",
                )
            )
        return out  # --speculative-config is priced (or refused): engines/sglang/speculative.py


ENGINE = register_engine(
    RegisteredEngine(
        "sglang",
        layout,
        SglangPlanner(),
        listed_at=2,
        token_pool=True,
        # ServerArgs.page_size 1; the radix tree is keyed by token ids
        prefix_layout=("1", "radix-token-ids"),
        checkpoint_kv=checkpoint_kv,
        wording=PoolWording(
            requested="(device - 0.5 GiB context) x mem_fraction_static {utilization}",
            available="rest = free after weights - free before x (1 - mem_fraction_static)",
            available_web="mem_fraction_static {utilization} arithmetic (SGLang)",
            graphs_by_version=False,
        ),
        label="SGLang",
        default_version=DEFAULT_SGLANG_VERSION,
    )
)
