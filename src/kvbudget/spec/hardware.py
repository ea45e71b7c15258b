"""GPU catalog: device memory, throughput and bandwidth, each value with its source.

The catalog is data (``spec/catalog/gpus.json``), not code. Memory is what the device reports
(``nvidia-smi`` / ``torch.cuda.mem_get_info`` total, MiB) where that figure is known, because
vLLM's ``gpu_memory_utilization`` is a fraction of exactly that number; otherwise the nominal
capacity, and the source string says so. Throughput figures are dense (no 2:4 sparsity)
tensor-core TFLOPS; bandwidths are decimal GB/s.

A custom device is built with :func:`custom_gpu` (``--gpu-memory 80GiB`` and friends).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbudget.errors import ConfigError
from kvbudget.units import MiB


class GpuSpec(BaseModel):
    """One accelerator model. ``memory_bytes`` is the per-device total the engine sees."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    aliases: tuple[str, ...] = ()
    device_name: str = Field(description="name as torch.cuda.get_device_name() reports it")
    vendor: str = "nvidia"
    #: NVIDIA's CUDA compute capability ("9.0", "10.0"); None for other vendors / unknown
    compute_capability: str | None = None
    memory_bytes: int = Field(gt=0, description="total device memory in bytes")
    memory_source: str
    bf16_dense_tflops: float | None = None
    bf16_source: str = ""
    fp8_dense_tflops: float | None = None
    fp8_source: str = ""
    #: dense NVFP4 (4-bit e2m1, block-scaled) tensor-core TFLOPS: Blackwell only
    fp4_dense_tflops: float | None = None
    fp4_source: str = ""
    hbm_bandwidth_gb_s: float | None = None
    bandwidth_source: str = ""
    interconnect: str = ""
    interconnect_gb_s: float | None = None
    interconnect_source: str = ""
    custom: bool = False

    @property
    def compute_capability_major(self) -> int | None:
        """The major version of :attr:`compute_capability` (10 for "10.3")."""
        if self.compute_capability is None:
            return None
        return int(self.compute_capability.split(".")[0])

    @property
    def memory_mib(self) -> float:
        """Total device memory in MiB."""
        return self.memory_bytes / MiB

    @property
    def hbm_bandwidth_bytes_per_s(self) -> float | None:
        return None if self.hbm_bandwidth_gb_s is None else self.hbm_bandwidth_gb_s * 1e9

    @property
    def interconnect_bytes_per_s(self) -> float | None:
        return None if self.interconnect_gb_s is None else self.interconnect_gb_s * 1e9

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump()
        data["aliases"] = list(self.aliases)
        data["memory_mib"] = self.memory_mib
        return data


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@lru_cache(maxsize=1)
def load_gpu_catalog() -> tuple[GpuSpec, ...]:
    """All GPUs of the bundled catalog, in file order."""
    text = resources.files("kvbudget.spec").joinpath("catalog/gpus.json").read_text("utf-8")
    data = json.loads(text)
    gpus = []
    for entry in data["gpus"]:
        fields = {k: v for k, v in entry.items() if k != "memory_mib"}
        fields["aliases"] = tuple(entry.get("aliases", ()))
        fields["memory_bytes"] = int(entry["memory_mib"]) * MiB
        gpus.append(GpuSpec(**fields))
    return tuple(gpus)


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU up by id or alias (case-insensitive); a one-line error lists the choices."""
    wanted = _norm(name)
    for gpu in load_gpu_catalog():
        if wanted == _norm(gpu.id) or wanted in {_norm(a) for a in gpu.aliases}:
            return gpu
    choices = ", ".join(g.id for g in load_gpu_catalog())
    raise ConfigError(
        f"gpu: unknown device {name!r}; choose one of {choices} "
        "(see 'kvbudget gpus') or describe it with --gpu-memory 80GiB",
        field="gpu",
    )


def custom_gpu(
    memory_bytes: int,
    *,
    base: GpuSpec | None = None,
    name: str = "custom",
    bf16_dense_tflops: float | None = None,
    hbm_bandwidth_gb_s: float | None = None,
) -> GpuSpec:
    """A device given by flags. With ``base``, only the memory (and given figures) change."""
    if memory_bytes <= 0:
        raise ConfigError(
            f"gpu_memory: must be a positive size, got {memory_bytes} bytes; write e.g. 80GiB",
            field="gpu_memory",
        )
    source = f"flag: --gpu-memory {memory_bytes} bytes"
    if base is not None:
        update: dict[str, Any] = {"custom": True}
        if memory_bytes != base.memory_bytes:
            update["memory_bytes"] = memory_bytes
            update["memory_source"] = source
        if bf16_dense_tflops is not None:
            update["bf16_dense_tflops"] = bf16_dense_tflops
            update["bf16_source"] = "flag"
        if hbm_bandwidth_gb_s is not None:
            update["hbm_bandwidth_gb_s"] = hbm_bandwidth_gb_s
            update["bandwidth_source"] = "flag"
        return base.model_copy(update=update)
    return GpuSpec(
        id=name,
        device_name=name,
        vendor="unknown",
        memory_bytes=memory_bytes,
        memory_source=source,
        bf16_dense_tflops=bf16_dense_tflops,
        bf16_source="flag" if bf16_dense_tflops is not None else "not given",
        hbm_bandwidth_gb_s=hbm_bandwidth_gb_s,
        bandwidth_source="flag" if hbm_bandwidth_gb_s is not None else "not given",
        custom=True,
    )
