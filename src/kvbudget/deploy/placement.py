"""Which nodes the engine's pods may run on: the GPU product the configuration was accepted on.

NVIDIA's GPU Feature Discovery (now part of ``NVIDIA/k8s-device-plugin``) labels every GPU node
``nvidia.com/gpu.product=<product>``, where ``<product>`` is the NVML device name (what
``nvidia-smi`` and ``torch.cuda.get_device_name()`` print) with every character outside
``[A-Za-z0-9-_. ]`` removed and runs of blanks joined by ``-``
(``internal/lm/resource.go`` ``sanitise``): ``NVIDIA H100 80GB HBM3`` ->
``NVIDIA-H100-80GB-HBM3``. The device name comes from kvbudget's GPU catalog (``device_name``,
``kvbudget gpus --json``) for the lock's ``gpu.type``, so the label is derived, not typed by hand;
``--gpu-product`` overrides it for a board the catalog names differently (an A100 PCIe is
``NVIDIA-A100-PCIE-40GB``, not the SXM4 name the catalog carries). AMD GPUs carry no such label
from GFD: no selector is written for them and the README says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvbudget.errors import ConfigError, KvbudgetError
from kvbudget.spec.hardware import get_gpu

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: a Kubernetes label value: at most 63 characters, alphanumeric at both ends, ``-_.`` inside
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def gfd_product(device_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GPU Feature Discovery writes for ``device_name``."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", device_name)
    return "-".join(kept.split())


@dataclass(frozen=True, slots=True)
class Placement:
    """The node selector (empty when none can be derived) and where its value came from."""

    node_selector: dict[str, str]
    source: str


def gpu_placement(gpu_type: str | None, override: str | None) -> Placement:
    """The GPU-product node selector for the lock's ``gpu.type`` (or ``--gpu-product``)."""
    if override is not None:
        if not _LABEL_VALUE.match(override) or not override:
            raise ConfigError(
                f"--gpu-product {override[:80]!r}: not a Kubernetes label value (at most 63 "
                "characters, letters, digits, '-', '_' and '.', alphanumeric at both ends); give "
                "the node's nvidia.com/gpu.product label, e.g. NVIDIA-H100-80GB-HBM3",
                field="gpu_product",
            )
        return Placement({GPU_PRODUCT_LABEL: override}, "--gpu-product")
    if not gpu_type:
        return Placement({}, "the lock names no gpu.type: pods may land on any GPU node")
    try:
        gpu = get_gpu(gpu_type)
    except KvbudgetError:
        return Placement(
            {}, f"gpu.type {gpu_type!r} is not in the catalog: pass --gpu-product with the label"
        )
    if gpu.vendor != "nvidia":
        return Placement(
            {},
            f"{gpu.id} is not an NVIDIA GPU: GPU Feature Discovery labels none; add your "
            "cluster's own node selector",
        )
    value = gfd_product(gpu.device_name)
    return Placement(
        {GPU_PRODUCT_LABEL: value},
        f"lock gpu.type {gpu_type!r} -> catalog device name {gpu.device_name!r} -> GPU Feature "
        "Discovery's label (k8s-device-plugin internal/lm/resource.go sanitise)",
    )
