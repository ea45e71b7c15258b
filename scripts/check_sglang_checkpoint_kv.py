"""Run SGLang 0.5.23's own ``--kv-cache-dtype auto`` rule on compressed-tensors and ``Fp8Config``
quant configs (no GPU, no model, no kvbudget), for ``tests/unit/plan/test_plan_checkpoint_kv_sglang.py``.

SGLang's package does not import without CUDA kernels, so the classes are rebuilt from their
source with only the members on this path, each as written (Python's ``ast``):
``QuantizationConfig.__init__`` / ``get_from_keys`` / ``get_from_keys_or``
(``srt/layers/quantization/base_config.py``), ``Fp8Config.__init__`` / ``from_config``
(``srt/layers/quantization/fp8.py``), ``CompressedTensorsConfig.__init__`` /
``kv_cache_quant_algo`` and ``CompressedTensorsKVCacheMethod.is_supported_scheme``
(``srt/layers/quantization/compressed_tensors/compressed_tensors.py``; the config is built with
``kv_cache_scheme=config.get("kv_cache_scheme")`` as ``from_config`` does, line 314), and
``configure_kv_cache_dtype`` (``srt/mem_cache/kv_cache_dtype.py``) on CUDA (not HIP, not CPU).
It prints, per quantization_config, the KV dtype ``auto`` resolves to and its element size.

``python scripts/check_sglang_checkpoint_kv.py /tmp/sglq4 [/tmp/sgl054/full]`` (a Python with torch;
folders holding ``sglang/srt``). With a second, older tree it says whether that release's two
classes name ``kv_cache_quant_algo`` at all (0.5.4's do not, so ``getattr`` gives None there).
"""

from __future__ import annotations

import ast
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

STATIC_FP8 = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}
CASES: list[tuple[str, dict[str, Any]]] = [
    ("compressed-tensors, static per-tensor fp8", {"kv_cache_scheme": STATIC_FP8}),
    ("compressed-tensors, symmetric true", {"kv_cache_scheme": {**STATIC_FP8, "symmetric": True}}),
    ("compressed-tensors, attn_head", {"kv_cache_scheme": {**STATIC_FP8, "strategy": "attn_head"}}),
    ("compressed-tensors, dynamic", {"kv_cache_scheme": {**STATIC_FP8, "dynamic": True}}),
    ("compressed-tensors, no kv_cache_scheme", {}),
    ("fp8, kv_cache_quant_algo FP8", {"quant_method": "fp8", "kv_cache_quant_algo": "FP8"}),
    ("fp8, kv_cache_quant_algo fp8", {"quant_method": "fp8", "kv_cache_quant_algo": "fp8"}),
    ("fp8, no kv_cache_quant_algo", {"quant_method": "fp8"}),
]


def _class(path: Path, name: str, members: set[str], bases: list[ast.expr]) -> ast.ClassDef:
    """Class ``name`` of ``path`` with only ``members`` (each as written) and ``bases``."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    body: list[ast.stmt] = [
        n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in members
    ]
    assert {n.name for n in body if isinstance(n, ast.FunctionDef)} == members, "re-read the file"
    cls.body, cls.bases, cls.keywords = body, bases, []
    return cls


def _function(path: Path, name: str) -> ast.stmt:
    tree = ast.parse(path.read_text())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def main() -> None:
    srt = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sglq4") / "sglang/srt"
    quant = srt / "layers/quantization"
    base = ast.Name("QuantizationConfig", ast.Load())
    nodes: list[ast.stmt] = [
        _class(
            quant / "base_config.py",
            "QuantizationConfig",
            {"__init__", "get_from_keys", "get_from_keys_or"},
            [],
        ),
        _class(quant / "fp8.py", "Fp8Config", {"__init__", "from_config"}, [base]),
        _class(
            quant / "compressed_tensors/compressed_tensors.py",
            "CompressedTensorsKVCacheMethod",
            {"is_supported_scheme"},
            [],
        ),
        _class(
            quant / "compressed_tensors/compressed_tensors.py",
            "CompressedTensorsConfig",
            {"__init__", "kv_cache_quant_algo"},
            [base],
        ),
        _function(srt / "mem_cache/kv_cache_dtype.py", "configure_kv_cache_dtype"),
    ]
    dtype_map = next(
        n
        for n in ast.parse((srt / "mem_cache/kv_cache_dtype.py").read_text()).body
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and n.targets[0].id == "TORCH_DTYPE_TO_KV_CACHE_STR"
    )
    nodes.insert(0, dtype_map)
    namespace: dict[str, Any] = {
        "__name__": "sglang_check",
        "torch": torch,
        "nn": torch.nn,
        "Any": Any,
        "Dict": dict,
        "List": list,
        "Optional": Any,
        "logger": logging.getLogger("sglang_check"),
        "log_info_on_rank0": lambda logger, message: None,
        "envs": SimpleNamespace(SGLANG_FP8_IGNORED_LAYERS=SimpleNamespace(get=lambda: None)),
        "ACTIVATION_SCHEMES": ["static", "dynamic"],  # fp8.py line 188
        "fp8_dtype": torch.float8_e4m3fn,  # CUDA (fp8_kernel.py)
        "_is_hip": False,
        "current_platform": SimpleNamespace(is_cpu=lambda: False),
    }
    code = compile(
        ast.fix_missing_locations(ast.Module(body=nodes, type_ignores=[])), "sglang", "exec"
    )
    exec(code, namespace)  # the members exactly as written in SGLang's files
    for name, config in CASES:
        if config.get("quant_method") == "fp8":
            quant_config = namespace["Fp8Config"].from_config(
                {"activation_scheme": "dynamic", **config}
            )
        else:
            quant_config = namespace["CompressedTensorsConfig"](
                target_scheme_map={},
                ignore=[],
                quant_format="float-quantized",
                sparsity_scheme_map={},
                sparsity_ignore_list=[],
                kv_cache_scheme=config.get("kv_cache_scheme"),
            )
        resolved, dtype = namespace["configure_kv_cache_dtype"](
            server_args_kv_cache_dtype="auto",
            model=SimpleNamespace(quant_config=quant_config),
            model_dtype=torch.bfloat16,
            is_draft_worker=False,
            is_dflash=False,
            speculative_draft_attention_backend=None,
        )
        size = torch.empty((), dtype=dtype).element_size()
        print(
            f"{name}: kv_cache_quant_algo={quant_config.kv_cache_quant_algo!r} "
            f"-> {resolved or 'auto'} ({dtype}, {size} B)"
        )
    for root in sys.argv[1:3]:
        print(f"{root}: names kv_cache_quant_algo: {names_kv_algo(Path(root) / 'sglang/srt')}")


def names_kv_algo(srt: Path) -> dict[str, bool]:
    """Whether ``Fp8Config`` / ``CompressedTensorsConfig`` of the tree mention the attribute."""
    out: dict[str, bool] = {}
    quant = srt / "layers/quantization"
    for path, name in (
        (quant / "fp8.py", "Fp8Config"),
        (quant / "compressed_tensors/compressed_tensors.py", "CompressedTensorsConfig"),
    ):
        tree = ast.parse(path.read_text())
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
        out[name] = any(
            (isinstance(n, ast.Attribute) and n.attr == "kv_cache_quant_algo")
            or (isinstance(n, ast.FunctionDef) and n.name == "kv_cache_quant_algo")
            for n in ast.walk(cls)
        )
    return out


if __name__ == "__main__":
    main()
