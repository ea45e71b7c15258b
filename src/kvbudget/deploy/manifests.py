"""Kubernetes objects for one accepted (or planned) service.

* one node per replica: a ``Deployment``; more GPUs than one node has: a ``LeaderWorkerSet``
  (``leaderworkerset.x-k8s.io/v1``) whose group spans ``ceil(TP x PP / gpus_per_node)`` pods;
* a ``Service`` on the engine's port;
* autoscaling (:mod:`kvbudget.deploy.autoscaling`) and, for more than one replica, an
  ``InferencePool`` with the endpoint picker's configuration
  (:mod:`kvbudget.deploy.inference_pool`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from kvbudget.accept.canary_metrics import service_name
from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.deploy.engine_args import EngineCommand
from kvbudget.deploy.engines.registry import deploy_engine
from kvbudget.deploy.k8s_checks import command_literal
from kvbudget.deploy.memory import HostBudget
from kvbudget.deploy.pods import PodExtras, PodTiming, engine_container, pod_spec
from kvbudget.errors import ConfigError


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


def object_meta(lay: Layout, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or lay.name,
        "namespace": lay.namespace,
        "labels": dict(lay.labels),
        "annotations": dict(lay.annotations),
    }


def pod_selector(lay: Layout) -> dict[str, str]:
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
        "metadata": object_meta(lay),
        "spec": {
            "replicas": lay.replicas,
            "selector": {"matchLabels": pod_selector(lay)},
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
    """Leader and worker commands (each engine's registered ``multinode``: vLLM over Ray, SGLang's
    own multi-node flags): the engine's argv shell-quoted, then every ``$`` doubled so Kubernetes expands only the ``$(LWS_*)``
    references written here."""
    entry = deploy_engine(cmd.engine)
    if entry.multinode is None:  # engine_command refuses llama.cpp first: TP x PP must be 1
        raise ConfigError(
            f"lock.tensor_parallel: {cmd.engine} runs in one pod; set tensor_parallel and "
            "pipeline_parallel to 1",
            field="lock.tensor_parallel",
        )
    leader, worker = entry.multinode(
        command_literal(" ".join(_quote(a) for a in cmd.argv)), lay.num_nodes
    )
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
        "metadata": object_meta(lay),
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
    selector = pod_selector(lay)
    if lay.num_nodes > 1:
        selector = {**selector, "role": "leader"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(lay),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": cmd.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
