"""Run SGLang 0.5.23's own weight-creating code for DeepSeek-V4-Flash at TP 4 on the CPU: no
GPU, no model, no kvbudget.

SGLang's package does not import without its CUDA kernels (``scripts/check_sglang_dsv4_pool.py``),
so this script takes the functions that decide the bytes from the source files, as written, and
runs them on a ``torch.nn.Module`` with tensors on the meta device:

* ``Fp8LinearMethod.create_fp8_weight_`` and its ``validate_block_quant_shapes``
  (``srt/layers/quantization/fp8.py`` lines 569-700) for each fp8 linear's shard, with Flash's
  ``[128, 128]`` block config, ``use_mxfp8`` off (``quant_method`` fp8);
* ``Fp8MoEMethod.create_fp8_moe_weight_`` (lines 1544-1790) with ``get_moe_weight_sizes`` and
  ``get_moe_padding_size`` (``srt/layers/moe/utils.py`` lines 1044-1090), for 256 routed experts:
  MXFP4 with ``fp4_scale_dtype=torch.float8_e8m0fnu`` as ``Mxfp4FlashinferCutlassMoEMethod``
  passes it on SM90 (``mxfp4_flashinfer_cutlass_moe.py`` lines 75-84), MXFP4 with the default
  (float32 off ROCm / XPU), and fp8 blocks;
* ``precompute_freqs_cis`` (``kernels/ops/attention/dsv4/rope.py`` lines 27-68, its
  ``lru_cache`` dropped) for a ratio-0 layer and a compressed layer of Flash.

The runtime context is stubbed: CUDA (``_is_hip``, ``_use_aiter``, ``is_xpu`` false), the
parameter classes as plain ``Parameter`` s, ``set_weight_attrs`` a no-op. It prints ``KVB_SGL
{...}``, the bytes ``tests/unit/plan/test_plan_dsv4_weights_sglang.py`` works by hand.

Run with a Python that has torch: ``python scripts/check_sglang_dsv4_weights.py /tmp/sglq4`` (a
folder holding ``sglang/srt`` and ``sglang/kernels``, unpacked from the 0.5.23 wheel).
"""

from __future__ import annotations

import ast
import json
import math
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch.nn import Module, Parameter

H, TP, EXPERTS, ROWS = 4096, 4, 256, 2048
QUANT = SimpleNamespace(
    weight_block_size=[128, 128], activation_scheme="dynamic", is_checkpoint_fp8_serialized=True
)


def _defs(path: Path, names: tuple[str, ...]) -> list[str]:
    """The ``def`` statements named, from ``path``, without their decorators."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name in names and node.name not in found:
            node.decorator_list = []
            found[node.name] = ast.unparse(node)
    missing = set(names) - set(found)
    assert not missing, missing
    return list(found.values())


def _param(data: torch.Tensor, **_: Any) -> Parameter:
    return Parameter(data, requires_grad=False)


def _namespace(root: Path) -> dict[str, Any]:
    ns: dict[str, Any] = {
        "torch": torch, "Module": Module, "LinearBase": Module, "List": list,
        "Optional": Any, "Parameter": Parameter, "ModelWeightParameter": _param,
        "BlockQuantScaleParameter": _param, "PerTensorScaleParameter": _param,
        "set_weight_attrs": lambda *a, **k: None, "print_warning_once": print,
        "_use_aiter": False, "_is_hip": False, "_use_hip_int4": False,
        "is_xpu": lambda: False, "os": os, "math": math,
    }  # fmt: skip
    sources = _defs(
        root / "srt/layers/quantization/fp8.py",
        ("create_fp8_weight_", "create_fp8_moe_weight_", "validate_block_quant_shapes"),
    )
    sources += _defs(
        root / "srt/layers/moe/utils.py", ("get_moe_weight_sizes", "get_moe_padding_size")
    )
    sources += _defs(root / "kernels/ops/attention/dsv4/rope.py", ("precompute_freqs_cis",))
    for source in sources:
        exec(source, ns)  # SGLang's own source, run as written
    ns["Fp8LinearMethod"] = SimpleNamespace(
        validate_block_quant_shapes=ns["validate_block_quant_shapes"]
    )
    # the one import inside create_fp8_moe_weight_
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.moe"):
        sys.modules.setdefault(name, types.ModuleType(name))
    supported = SimpleNamespace(
        BLOCK=SimpleNamespace(value="block"), TENSOR=SimpleNamespace(value="tensor")
    )
    sys.modules["sglang.srt.layers.moe.fused_moe_triton"] = SimpleNamespace(  # type: ignore[assignment]
        FusedMoeWeightScaleSupported=supported
    )
    return ns


def _bytes(layer: Module) -> int:
    return sum(p.numel() * p.element_size() for p in layer.parameters())


def _linear(ns: dict[str, Any], n_in: int, n_out: int, *, split_in: bool = False,
            split_out: bool = False, shards: int = 1) -> int:  # fmt: skip
    layer: Any = Module()
    layer.tp_group = SimpleNamespace(world_size=TP if split_in or split_out else 1)
    local_in = n_in // TP if split_in else n_in
    local_out = n_out // TP if split_out else n_out
    with torch.device("meta"):
        ns["create_fp8_weight_"](
            layer, block_quant=True, quant_config=QUANT, use_mxfp8=False,
            output_size_per_partition=local_out, input_size_per_partition=local_in,
            output_partition_sizes=[local_out // shards] * shards, input_size=n_in,
            output_size=n_out, params_dtype=torch.bfloat16, weight_loader=None,
            is_checkpoint_fp8_serialized=True,
        )  # fmt: skip
    return _bytes(layer)


def _experts(ns: dict[str, Any], *, fp4: bool, scale_dtype: torch.dtype | None) -> int:
    layer: Any = Module()
    layer.moe_tp_size = TP
    layer.moe_runner_config = SimpleNamespace(is_gated=True)
    with torch.device("meta"):
        ns["create_fp8_moe_weight_"](
            layer, num_experts=EXPERTS, hidden_size=H, intermediate_size_per_partition=ROWS // TP,
            block_quant=True, quant_config=QUANT, use_mxfp8=False,
            is_checkpoint_fp8_serialized=True, is_fp4_expert=fp4, params_dtype=torch.bfloat16,
            fp4_scale_dtype=scale_dtype,
        )  # fmt: skip
    return _bytes(layer)


def main(root: Path) -> None:
    ns = _namespace(root)
    scaling = {"factor": 16, "beta_fast": 32, "beta_slow": 1}
    with torch.device("meta"):
        swa = ns["precompute_freqs_cis"](64, 1_048_576, 0, 10000, **scaling)
        compressed = ns["precompute_freqs_cis"](64, 1_048_576, 65536, 160000, **scaling)
    out = {
        "wqkv_a": _linear(ns, H, 1024 + 512),
        "wq_b": _linear(ns, 1024, 64 * 512, split_out=True),
        "wo_a": _linear(ns, 64 * 512 // 8, 8 * 1024, split_out=True),
        "wo_b": _linear(ns, 8 * 1024, H, split_in=True),
        "indexer.wq_b": _linear(ns, 1024, 64 * 128),
        "shared.gate_up": _linear(ns, H, 2 * ROWS, split_out=True, shards=2),
        "shared.down": _linear(ns, ROWS, H, split_in=True),
        "experts.mxfp4_e8m0": _experts(ns, fp4=True, scale_dtype=torch.float8_e8m0fnu),
        "experts.mxfp4_default": _experts(ns, fp4=True, scale_dtype=None),
        "experts.fp8": _experts(ns, fp4=False, scale_dtype=None),
        "freqs_cis": [t.numel() * t.element_size() for t in (swa, compressed)],
    }
    print("KVB_SGL", json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]) / "sglang")
