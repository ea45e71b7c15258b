"""Autoscaling of a service on the seed's signals (waiting requests, TTFT, queue time): an
``autoscaling/v2`` HPA on custom metrics (names as prometheus-adapter exposes them) or a KEDA
``ScaledObject``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from kvbudget.deploy.manifests import Layout, object_meta
from kvbudget.deploy.source import Figure

Autoscaler = Literal["hpa", "keda", "none"]


#: scale out before the ceiling is reached: target = ceiling x this
SCALE_TARGET_FRACTION = 0.8


@dataclass(frozen=True, slots=True)
class ScaleSignals:
    waiting_per_pod: Figure
    ttft_target_s: Figure | None
    queue_target_s: Figure | None


def _workload_ref(lay: Layout) -> dict[str, str]:
    if lay.num_nodes > 1:
        return {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": lay.name,
        }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": lay.name}


def _quantity(value: float) -> str:
    """A Kubernetes quantity for a small positive number (milli-units below 10)."""
    if value >= 10 or float(value).is_integer():
        return str(math.ceil(value))
    return f"{max(1, round(value * 1000))}m"


def hpa(lay: Layout, signals: ScaleSignals) -> dict[str, Any]:
    def pods_metric(name: str, value: float) -> dict[str, Any]:
        return {
            "type": "Pods",
            "pods": {
                "metric": {"name": name},
                "target": {"type": "AverageValue", "averageValue": _quantity(value)},
            },
        }

    metrics = [pods_metric("vllm_num_requests_waiting", signals.waiting_per_pod.value)]
    if signals.ttft_target_s is not None:
        metrics.append(pods_metric("kvbudget_ttft_seconds_p95", signals.ttft_target_s.value))
    if signals.queue_target_s is not None:
        metrics.append(pods_metric("kvbudget_queue_seconds_p95", signals.queue_target_s.value))
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": object_meta(lay),
        "spec": {
            "scaleTargetRef": _workload_ref(lay),
            "minReplicas": lay.replicas,
            "maxReplicas": lay.max_replicas,
            "metrics": metrics,
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 60},
                # a removed replica takes its warm prefixes with it: scale in slowly
                "scaleDown": {"stabilizationWindowSeconds": 600},
            },
        },
    }


def keda_scaled_object(
    lay: Layout, signals: ScaleSignals, *, prometheus_url: str, selector: str
) -> dict[str, Any]:
    triggers = [
        {
            "type": "prometheus",
            "metadata": {
                "serverAddress": prometheus_url,
                "query": f"sum(vllm:num_requests_waiting{{{selector}}})",
                "threshold": f"{signals.waiting_per_pod.value:g}",
            },
        }
    ]
    if signals.ttft_target_s is not None:
        triggers.append(
            {
                "type": "prometheus",
                "metadata": {
                    "serverAddress": prometheus_url,
                    "query": f"max(kvbudget:ttft_seconds:p95{{{selector}}})",
                    "threshold": f"{signals.ttft_target_s.value:g}",
                    "metricType": "Value",
                },
            }
        )
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": object_meta(lay),
        "spec": {
            "scaleTargetRef": {k: v for k, v in _workload_ref(lay).items()},
            "minReplicaCount": lay.replicas,
            "maxReplicaCount": lay.max_replicas,
            "cooldownPeriod": 600,
            "triggers": triggers,
        },
    }
