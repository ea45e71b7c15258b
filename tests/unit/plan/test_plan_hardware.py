"""GPU catalog: required devices, reported memory, sources, lookups and custom devices."""

from __future__ import annotations

import pytest

from kvbudget.errors import ConfigError
from kvbudget.spec.hardware import custom_gpu, get_gpu, load_gpu_catalog

REQUIRED = [
    "H100-SXM",
    "H100-PCIe",
    "H200",
    "H20",
    "A100-40GB",
    "A100-80GB",
    "L40S",
    "L4",
    "A10G",
    "RTX-3090",
    "RTX-4090",
    "RTX-PRO-6000",
    "B200",
    "MI300X",
    "MI325X",
]


def test_required_devices_with_sources() -> None:
    ids = {g.id for g in load_gpu_catalog()}
    assert set(REQUIRED) <= ids
    for g in load_gpu_catalog():
        assert g.memory_source and g.bf16_source and g.bandwidth_source and g.interconnect_source
        assert g.memory_bytes > 16 << 30


def test_h100_reports_81559_mib() -> None:
    # reference §7.2: the H100 80GB reports 81559 MiB
    assert get_gpu("h100").memory_bytes == 81559 * (1 << 20)


def test_h100_memory_source_names_both_totals() -> None:
    # the catalog's figure is nvidia-smi's; vLLM multiplies torch's total, which its log prints as
    # total_memory=79.19GiB (tests/fixtures/vllm_gpu_logs/runs.json, every run)
    source = get_gpu("h100").memory_source
    assert "nvidia-smi 81559 MiB" in source and "79.19 GiB" in source
    assert "torch total 81559" not in source


def test_aliases_case_insensitive() -> None:
    assert get_gpu("H100 SXM").id == "H100-SXM"
    assert get_gpu("mi300x").id == "MI300X"


def test_unknown_gpu_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        get_gpu("GTX-480")
    assert "\n" not in err.value.one_line()
    assert "H100-SXM" in str(err.value)


def test_custom_device() -> None:
    g = custom_gpu(80 << 30)
    assert g.memory_bytes == 80 << 30 and g.custom
    based = custom_gpu(40 << 30, base=get_gpu("A100-80GB"))
    assert based.memory_bytes == 40 << 30 and based.device_name == "NVIDIA A100-SXM4-80GB"
    with pytest.raises(ConfigError):
        custom_gpu(0)


def test_custom_device_through_the_planner() -> None:
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.capacity.planner import resolve_gpu

    g = resolve_gpu(
        PlanRequest(
            model="m", gpu_memory_bytes=64 << 30, gpu_bf16_tflops=500, gpu_bandwidth_gb_s=2000
        )
    )
    assert (g.memory_bytes, g.bf16_dense_tflops, g.hbm_bandwidth_gb_s) == (64 << 30, 500, 2000)
    h = resolve_gpu(PlanRequest(model="m", gpu="H100", gpu_bandwidth_gb_s=3000))
    assert h.memory_bytes == 81559 << 20 and h.hbm_bandwidth_gb_s == 3000 and h.custom
