"""For more than one replica: an ``InferencePool`` (``inference.networking.k8s.io/v1``, fields from the
Gateway API Inference Extension API reference) and the endpoint picker's scorer configuration
(prefix-aware with queue and KV-utilisation scorers as the load fallback)."""

from __future__ import annotations

from typing import Any

from kvbudget.deploy.engine_args import EngineCommand
from kvbudget.deploy.manifests import Layout, object_meta, pod_selector

EPP_PORT = 9002


def inference_pool(lay: Layout, cmd: EngineCommand) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": lay.name, "namespace": lay.namespace, "labels": dict(lay.labels)},
        "spec": {
            "selector": {"matchLabels": pod_selector(lay)},
            "targetPorts": [{"number": cmd.port}],
            "endpointPickerRef": {
                "name": f"{lay.name}-epp",
                "port": {"number": EPP_PORT},
                # the picker down must not take the service down: forward to any endpoint
                "failureMode": "FailOpen",
            },
        },
    }


def epp_config_map(lay: Layout, *, block_size: int) -> dict[str, Any]:
    import yaml

    config = {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "single-profile-handler"},
            {"type": "prefix-cache-scorer", "parameters": {"blockSize": block_size}},
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "max-score-picker"},
        ],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": "prefix-cache-scorer", "weight": 2},
                    {"pluginRef": "queue-scorer", "weight": 1},
                    {"pluginRef": "kv-cache-utilization-scorer", "weight": 1},
                    {"pluginRef": "max-score-picker"},
                ],
            }
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(lay, f"{lay.name}-epp-config"),
        "data": {"epp-config.yaml": yaml.safe_dump(config, sort_keys=False)},
    }
