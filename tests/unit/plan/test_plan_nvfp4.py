"""ModelOpt checkpoints (vLLM ``modelopt`` / ``modelopt_fp4``) and the B300, worked by hand.

Byte layout from vLLM 0.32.0 ``model_executor/layers/quantization/modelopt.py`` (the NVFP4
static scheme's ``create_weights``): ``weight`` uint8 ``(out, in // 2)`` (two e2m1 values a
byte), ``weight_scale`` float8_e4m3fn ``(out, in // group_size)``, ``weight_scale_2`` one fp32
per partition and one fp32 input (global) scale. The FP8 scheme: 1 B a weight plus a per-tensor
fp32 scale. vLLM names a ModelOpt config by its ``quant_algo``
(``override_quantization_method``): FP4 -> ``modelopt_fp4``, FP8 -> ``modelopt``.
"""

from __future__ import annotations

import pytest

from kvbudget.capacity.model_dtype import vllm_quant_name, with_quantization
from kvbudget.capacity.weights import Matrix, _matrix_bytes, compute_weights
from kvbudget.errors import ConfigError
from kvbudget.sim.aic import GPU_SYSTEMS
from kvbudget.spec.hardware import get_gpu
from kvbudget.spec.model import ModelSpec
from kvbudget.units import MiB
from tests.unit.plan.test_plan_weights import spec

NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}


def _spec(quant: dict[str, object] | None) -> ModelSpec:
    """test_plan_weights' four-layer Llama (hidden 1024, 8 heads, vocab 1000, MLP 4096)."""
    return spec(quantization_config=quant)


def _nvfp4(n_in: int, n_out: int) -> int:
    return n_in * n_out // 2 + n_out * (n_in // 16) + 4 + 4


def test_vllm_names_a_modelopt_config_by_its_algorithm() -> None:
    assert vllm_quant_name(NVFP4) == "modelopt_fp4"
    assert vllm_quant_name({"quant_method": "modelopt", "quant_algo": "FP8"}) == "modelopt"
    nested = {"quant_method": "modelopt", "quantization": {"quant_algo": "nvfp4"}}
    assert vllm_quant_name(nested) == "modelopt_fp4"
    assert vllm_quant_name({"quant_method": "FP8"}) == "fp8"
    assert vllm_quant_name(None) == "none"


def test_one_nvfp4_matrix() -> None:
    m = Matrix("w", 4096, 4096)
    # 8 MiB of packed e2m1, 4096 x 256 one-byte block scales, two fp32 per-tensor scales
    assert _matrix_bytes(m, (4096, 4096), NVFP4, 2) == 8_388_608 + 1_048_576 + 8
    fp8 = {"quant_method": "modelopt", "quant_algo": "FP8"}
    assert _matrix_bytes(m, (4096, 4096), fp8, 2) == 4096 * 4096 + 4


def test_an_nvfp4_model_by_hand() -> None:
    """Four layers: q, k, v, o 1024 x 1024, gate_up 1024 x 8192, down 4096 x 1024 in NVFP4;
    norms, embeddings and lm_head in bf16 (vocab 1000, untied), final norm."""
    layer = 4 * _nvfp4(1024, 1024) + _nvfp4(1024, 8192) + _nvfp4(4096, 1024) + 2 * 1024 * 2
    assert layer == 4 * 589_832 + 4_718_600 + 2_359_304 + 4096
    w = compute_weights(_spec(NVFP4))
    assert w.total_bytes == 4 * layer + 2 * 1000 * 1024 * 2 + 1024 * 2
    assert w.quantization == "modelopt_fp4" and w.source == "computed"


def test_excluded_modules_make_the_figure_an_estimate() -> None:
    quant = {**NVFP4, "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}
    w = compute_weights(_spec(quant))
    assert w.source == "estimated"
    assert any("model.layers.0.self_attn*" in note for note in w.notes)


def test_the_flag_sizes_a_modelopt_export_and_refuses_a_contradiction() -> None:
    sized = with_quantization(_spec(None), "modelopt_fp4")
    assert vllm_quant_name(sized.quantization_config) == "modelopt_fp4"
    assert compute_weights(sized).total_bytes == compute_weights(_spec(NVFP4)).total_bytes
    assert with_quantization(_spec(NVFP4), "modelopt_fp4").quantization_config == NVFP4
    with pytest.raises(ConfigError, match="contradicts the config's quantization_config"):
        with_quantization(_spec({"quant_method": "fp8"}), "modelopt_fp4")
    with pytest.raises(ConfigError, match=r"pass --quantization modelopt_fp4"):
        with_quantization(_spec(NVFP4), "fp8")


def test_b300_from_nvidia_figures() -> None:
    """aiconfigurator-core 0.12.0 ``systems/b300_sxm.yaml`` (NVIDIA's Blackwell Ultra
    datasheet): 275040 MiB reported by nvidia-smi, 7.75 TB/s, 2250 / 4500 / 14000 dense
    BF16 / FP8 / FP4 TFLOPS; torch names it "NVIDIA B300 SXM6 AC"."""
    gpu = get_gpu("b300")
    assert gpu.memory_bytes == 275040 * MiB
    assert (gpu.bf16_dense_tflops, gpu.fp8_dense_tflops, gpu.fp4_dense_tflops) == (
        2250.0,
        4500.0,
        14000.0,
    )
    assert gpu.hbm_bandwidth_gb_s == 7750
    assert GPU_SYSTEMS["B300"] == "b300_sxm"
