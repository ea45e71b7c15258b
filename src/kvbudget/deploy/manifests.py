"""Kubernetes objects for one accepted (or planned) service.

* one node per replica: a ``Deployment``; more GPUs than one node has: a ``LeaderWorkerSet``
  (``leaderworkerset.x-k8s.io/v1``) whose group spans ``ceil(TP x PP / gpus_per_node)`` pods;
* a ``Service`` on the engine's port;
* autoscaling on the seed's signals (waiting requests, TTFT, queue time) as an ``autoscaling/v2``
  HPA on custom metrics (names as prometheus-adapter exposes them) or a KEDA ``ScaledObject``;
* for more than one replica: an ``InferencePool`` (``inference.networking.k8s.io/v1``, fields from
  the Gateway API Inference Extension API reference) and the endpoint picker's scorer
  configuration (prefix-aware with queue and KV-utilisation scorers as the load fallback).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, assert_never

from kvbudget.accept.canary_metrics import service_name
from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.deploy.engine_args import EngineCommand
from kvbudget.deploy.k8s_checks import command_literal
from kvbudget.deploy.memory import HostBudget
from kvbudget.deploy.pods import PodExtras, PodTiming, engine_container, pod_spec
from kvbudget.deploy.source import Figure
from kvbudget.errors import ConfigError

Autoscaler = Literal["hpa", "keda", "none"]
EPP_PORT = 9002
#: scale out before the ceiling is reached: target = ceiling x this
SCALE_TARGET_FRACTION = 0.8


def k8s_name(text: str, *, max_len: int = 52) -> str:
    """A DNS-1123 label from a plan name (the same name ``kvbudget canary`` labels with)."""
    return service_name(text, max_len=max_len)


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    namespace: str
    image: str
    replicas: int
    max_replicas: int
    gpus_per_pod: int
    num_nodes: int
    labels: dict[str, str]
    annotations: dict[str, str]
    #: the weights' volumes and the GPU-product node selector, on every engine pod
    extras: PodExtras = field(default_factory=PodExtras)


def layout(
    lock: ObjectLock,
    *,
    name: str,
    namespace: str,
    image: str,
    replicas: int | None,
    max_replicas: int | None,
    gpus_per_node: int,
    annotations: dict[str, str],
    extras: PodExtras | None = None,
) -> Layout:
    gpus = (lock.tensor_parallel.value or 1) * (lock.pipeline_parallel.value or 1)
    if replicas is None:
        count = lock.gpu.count.value
        replicas = max(1, (count or gpus) // gpus)
    nodes = math.ceil(gpus / gpus_per_node)
    per_pod = gpus if nodes == 1 else gpus_per_node
    labels = {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": "inference",
        "app.kubernetes.io/managed-by": "kvbudget",
    }
    return Layout(
        name=name,
        namespace=namespace,
        image=image,
        replicas=replicas,
        max_replicas=max(max_replicas or 2 * replicas, replicas),
        gpus_per_pod=per_pod,
        num_nodes=nodes,
        labels=labels,
        annotations=annotations,
        extras=extras or PodExtras(),
    )


def _meta(lay: Layout, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or lay.name,
        "namespace": lay.namespace,
        "labels": dict(lay.labels),
        "annotations": dict(lay.annotations),
    }


def _selector(lay: Layout) -> dict[str, str]:
    return {"app.kubernetes.io/name": lay.name}


def deployment(
    lay: Layout,
    cmd: EngineCommand,
    budget: HostBudget,
    timing: PodTiming,
    *,
    warm_prefix_gate: bool,
) -> dict[str, Any]:
    container = engine_container(
        cmd,
        image=lay.image,
        budget=budget,
        gpus=lay.gpus_per_pod,
        timing=timing,
        extras=lay.extras,
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(lay),
        "spec": {
            "replicas": lay.replicas,
            "selector": {"matchLabels": _selector(lay)},
            # a new replica starts with a cold cache: add one, then retire one
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {"labels": dict(lay.labels)},
                "spec": pod_spec(
                    container,
                    budget=budget,
                    timing=timing,
                    warm_prefix_gate=warm_prefix_gate,
                    extras=lay.extras,
                ),
            },
        },
    }


def _multinode_argv(cmd: EngineCommand, lay: Layout) -> tuple[list[str], list[str]]:
    """Leader and worker commands (vLLM over Ray; SGLang's own multi-node flags): the engine's
    argv shell-quoted, then every ``$`` doubled so Kubernetes expands only the ``$(LWS_*)``
    references written here."""
    if cmd.engine == "llamacpp":  # engine_command refuses it first: TP x PP must be 1
        raise ConfigError(
            "lock.tensor_parallel: llama-server runs in one pod; set tensor_parallel and "
            "pipeline_parallel to 1 for llama.cpp",
            field="lock.tensor_parallel",
        )
    argv = command_literal(" ".join(_quote(a) for a in cmd.argv))
    if cmd.engine == "vllm":
        leader = f"ray start --head --port=6379 && {argv} --distributed-executor-backend ray"
        worker = "ray start --address=$(LWS_LEADER_ADDRESS):6379 --block"
    elif cmd.engine == "sglang":
        multi = (
            f"--nnodes {lay.num_nodes} --node-rank $(LWS_WORKER_INDEX) "
            "--dist-init-addr $(LWS_LEADER_ADDRESS):20000"
        )
        leader = f"{argv} {multi}"
        worker = leader
    else:
        assert_never(cmd.engine)
    return ["/bin/sh", "-c", leader], ["/bin/sh", "-c", worker]


def _quote(arg: str) -> str:
    return (
        arg
        if re.fullmatch(r"[A-Za-z0-9_./:=@%+,-]+", arg)
        else "'" + arg.replace("'", "'\\''") + "'"
    )


def leader_worker_set(
    lay: Layout,
    cmd: EngineCommand,
    budget: HostBudget,
    timing: PodTiming,
    *,
    warm_prefix_gate: bool,
) -> dict[str, Any]:
    leader_argv, worker_argv = _multinode_argv(cmd, lay)
    leader = engine_container(
        cmd,
        image=lay.image,
        budget=budget,
        gpus=lay.gpus_per_pod,
        timing=timing,
        argv=leader_argv,
        extras=lay.extras,
    )
    worker = engine_container(
        cmd,
        image=lay.image,
        budget=budget,
        gpus=lay.gpus_per_pod,
        timing=timing,
        argv=worker_argv,
        probes=False,
        extras=lay.extras,
    )
    worker.pop("ports", None)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(lay),
        "spec": {
            "replicas": lay.replicas,
            "leaderWorkerTemplate": {
                "size": lay.num_nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": {**lay.labels, "role": "leader"}},
                    "spec": pod_spec(
                        leader,
                        budget=budget,
                        timing=timing,
                        warm_prefix_gate=warm_prefix_gate,
                        extras=lay.extras,
                    ),
                },
                "workerTemplate": {
                    "metadata": {"labels": {**lay.labels, "role": "worker"}},
                    "spec": pod_spec(
                        worker,
                        budget=budget,
                        timing=timing,
                        warm_prefix_gate=False,
                        extras=lay.extras,
                    ),
                },
            },
        },
    }


def service(lay: Layout, cmd: EngineCommand) -> dict[str, Any]:
    selector = _selector(lay)
    if lay.num_nodes > 1:
        selector = {**selector, "role": "leader"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(lay),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": cmd.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


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
        "metadata": _meta(lay),
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
        "metadata": _meta(lay),
        "spec": {
            "scaleTargetRef": {k: v for k, v in _workload_ref(lay).items()},
            "minReplicaCount": lay.replicas,
            "maxReplicaCount": lay.max_replicas,
            "cooldownPeriod": 600,
            "triggers": triggers,
        },
    }


def inference_pool(lay: Layout, cmd: EngineCommand) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": lay.name, "namespace": lay.namespace, "labels": dict(lay.labels)},
        "spec": {
            "selector": {"matchLabels": _selector(lay)},
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
        "metadata": _meta(lay, f"{lay.name}-epp-config"),
        "data": {"epp-config.yaml": yaml.safe_dump(config, sort_keys=False)},
    }
