"""``render_deploy``: a plan or accepted report in, manifest files, alert rules and a README out.

Writes into DIR: ``<kind>.yaml`` per object (``deployment.yaml`` or ``leaderworkerset.yaml``,
``service.yaml``, ``hpa.yaml`` or ``keda-scaledobject.yaml``, for more than one replica
``inferencepool.yaml`` and ``epp-config.yaml``), ``alerts.rules.yaml`` (a Prometheus rule file)
and ``README.md`` saying where every number came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvbudget.accept.targets.capacity import plan_request
from kvbudget.capacity.planner import make_plan
from kvbudget.deploy.alerts import AlertOptions, RuleSet, build_rules, rule_file
from kvbudget.deploy.autoscaling import (
    SCALE_TARGET_FRACTION,
    Autoscaler,
    ScaleSignals,
    hpa,
    keda_scaled_object,
)
from kvbudget.deploy.engine_args import EngineCommand, engine_command, engine_name
from kvbudget.deploy.engines.registry import deploy_engine
from kvbudget.deploy.inference_pool import epp_config_map, inference_pool
from kvbudget.deploy.k8s_checks import (
    INT64_MAX,
    check_image,
    check_namespace,
    check_service_name,
    k8s_int,
    pod_seconds,
)
from kvbudget.deploy.manifests import (
    Layout,
    deployment,
    k8s_name,
    layout,
    leader_worker_set,
    service,
)
from kvbudget.deploy.memory import DEFAULT_SIDECAR_BYTES, HostBudget, host_budget
from kvbudget.deploy.model_source import ModelSourceOptions, model_source
from kvbudget.deploy.placement import gpu_placement
from kvbudget.deploy.pods import SHUTDOWN_S, PodExtras, PodTiming, pod_timing
from kvbudget.deploy.promql import check_selector, duration_ms, label_value
from kvbudget.deploy.readme import readme_text
from kvbudget.deploy.source import (
    DeploySource,
    Figure,
    accepted_peak,
    accepted_queue_p99,
    ceiling,
    e2e_p99,
    measured_ready_s,
)
from kvbudget.engine_name import EngineName
from kvbudget.errors import KvbudgetError
from kvbudget.units import format_bytes

#: assumed read speed of the weights (local NVMe or a PVC); --weights-read-bytes-per-s
DEFAULT_WEIGHTS_READ_BYTES_PER_S = 1e9
#: assumed engine initialisation after the weights are read (profiling, CUDA graphs)
INIT_S = 120.0


@dataclass(frozen=True, slots=True)
class DeployOptions:
    namespace: str = "default"
    name: str | None = None
    image: str | None = None
    model_path: str | None = None
    replicas: int | None = None
    max_replicas: int | None = None
    gpus_per_node: int = 8
    autoscaler: Autoscaler = "hpa"
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    load_time_s: float | None = None
    weights_read_bytes_per_s: float = DEFAULT_WEIGHTS_READ_BYTES_PER_S
    shm_bytes: int | None = None
    sidecar_bytes: int = DEFAULT_SIDECAR_BYTES
    warm_prefix_gate: bool = False
    alert_for: str = "10m"
    rate_window: str = "5m"
    kv_high_water: float = 0.90
    metric_selector: str | None = None
    model_source: ModelSourceOptions = field(default_factory=ModelSourceOptions)
    gpu_product: str | None = None


@dataclass(slots=True)
class Rendered:
    files: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rules: dict[str, Any] = field(default_factory=dict)
    readme: str = ""


def _weights(src: DeploySource, lay_gpus: int) -> tuple[int, str]:
    lock = src.plan.lock
    try:
        plan = make_plan(plan_request(lock, weights_only=True))
    except KvbudgetError as exc:
        raise type(exc)(
            f"{exc} (kvbudget deploy needs the weight bytes for the memory budget)"
        ) from None
    w = plan.weights
    if lay_gpus >= plan.num_gpus:
        total = w.total_bytes
        how = f"all weights, {w.method} ({w.source}): the pod loads every shard"
    else:
        total = w.max_rank_bytes * lay_gpus
        how = f"{lay_gpus} x the largest rank's {format_bytes(w.max_rank_bytes)} ({w.method})"
    return total, how


def _load_time(src: DeploySource, opts: DeployOptions, weights_bytes: int) -> Figure:
    if opts.load_time_s is not None:
        return Figure(opts.load_time_s, "declared", "--load-time-s")
    measured = measured_ready_s(src)
    if measured is not None:
        return measured
    read_s = weights_bytes / opts.weights_read_bytes_per_s
    return Figure(
        round(read_s + INIT_S, 1),
        "computed",
        f"{format_bytes(weights_bytes)} at {opts.weights_read_bytes_per_s:.3g} B/s (assumed, "
        f"--weights-read-bytes-per-s) + {INIT_S:g} s engine init (assumed)",
    )


def _signals(src: DeploySource) -> ScaleSignals:
    waiting = accepted_peak(src, "num_waiting")
    if waiting is None or waiting.value < 1:
        why = "no accepted queue" if waiting is None else f"accepted {waiting.text()}"
        waiting = Figure(1.0, "assumed", f"1 waiting request per replica ({why})")
    ttft = ceiling(src, "ttft_s")
    ttft_target = (
        None
        if ttft is None
        else Figure(
            round(ttft[1] * SCALE_TARGET_FRACTION, 4),
            "declared",
            f"{SCALE_TARGET_FRACTION:g} x plan stop.ttft_s.{ttft[0]} {ttft[1]:g} s",
        )
    )
    queue = accepted_queue_p99(src)
    queue_target = None
    if queue is not None and queue.value > 0:
        queue_target = Figure(max(queue.value, 0.05), queue.kind, queue.source)
    return ScaleSignals(waiting, ttft_target, queue_target)


def _image(src: DeploySource, opts: DeployOptions, engine: EngineName) -> tuple[str, str]:
    if opts.image:
        return opts.image, "--image"
    container = src.plan.lock.engine.container.value
    if container:
        return str(container), f"lock.engine.container ({src.plan.lock.engine.container.status})"
    version = src.plan.lock.engine.version.value or "latest"
    image = deploy_engine(engine).image
    return image.format(version=version), "assumed from the engine version: pin it"


def _checked_signals(src: DeploySource) -> ScaleSignals:
    """The autoscaler targets, each a quantity Kubernetes can hold (int64)."""
    signals = _signals(src)
    for what, fig in (
        ("HPA target vllm_num_requests_waiting", signals.waiting_per_pod),
        ("HPA target kvbudget_ttft_seconds_p95", signals.ttft_target_s),
        ("HPA target kvbudget_queue_seconds_p95", signals.queue_target_s),
    ):
        if fig is not None:
            k8s_int(math.ceil(fig.value) if math.isfinite(fig.value) else fig.value,
                    field=what, source=fig.source, high=INT64_MAX)  # fmt: skip
    return signals


def _checked_layout(src: DeploySource, opts: DeployOptions, name: str, **kw: Any) -> Layout:
    """The replica layout, every count an int32 as the Deployment/HPA/LWS fields are."""
    lock = src.plan.lock
    gpus = (lock.tensor_parallel.value or 1) * (lock.pipeline_parallel.value or 1)
    replicas_from = (
        "--replicas" if opts.replicas is not None else f"lock.gpu.count / (TP x PP = {gpus})"
    )
    lay = layout(
        lock,
        name=name,
        namespace=opts.namespace,
        replicas=opts.replicas,
        max_replicas=opts.max_replicas,
        gpus_per_node=opts.gpus_per_node,
        **kw,
    )
    k8s_int(lay.replicas, field="replicas", source=replicas_from, low=1)
    max_from = "--max-replicas" if opts.max_replicas is not None else f"2 x {replicas_from}"
    k8s_int(lay.max_replicas, field="maxReplicas", source=max_from, low=1)
    k8s_int(lay.num_nodes, field="LeaderWorkerSet size", source="TP x PP / --gpus-per-node")
    return lay


def render_deploy(src: DeploySource, opts: DeployOptions) -> Rendered:
    lock = src.plan.lock
    engine = engine_name(lock)
    check_namespace(opts.namespace)
    duration_ms(opts.alert_for, flag="--alert-for", positive=False)
    duration_ms(opts.rate_window, flag="--rate-window", positive=True)
    name = check_service_name(
        k8s_name(opts.name or src.plan.name),
        "--service" if opts.name else "the plan's name (--service)",
    )
    image, image_how = _image(src, opts, engine)
    check_image(image, "lock.engine.version" if image_how.startswith("assumed") else image_how)
    annotations = {
        "kvbudget.io/source": f"{src.origin}: {src.path.name}",
        "kvbudget.io/plan-sha256": src.plan.canonical_sha256(),
        "kvbudget.io/figures": src.provenance,
    }
    if src.verdict is not None:
        annotations["kvbudget.io/verdict"] = src.verdict
    weights = model_source(opts.model_path or lock.model.id, opts.model_source)
    placement = gpu_placement(lock.gpu.type.value, opts.gpu_product)
    extras = PodExtras(
        volumes=tuple(weights.volumes),
        mounts=tuple(weights.mounts),
        env=tuple(weights.env),
        node_selector=placement.node_selector,
    )
    lay: Layout = _checked_layout(
        src, opts, name, image=image, annotations=annotations, extras=extras
    )
    weights_bytes, weights_how = _weights(src, lay.gpus_per_pod)
    budget: HostBudget = host_budget(
        src.plan,
        lock,
        weights_bytes=weights_bytes,
        weights_how=weights_how,
        gpus_per_pod=lay.gpus_per_pod,
        sidecar_bytes=opts.sidecar_bytes,
        shm_bytes=opts.shm_bytes,
    )
    largest = max(budget.terms, key=lambda t: t.num_bytes)
    k8s_int(budget.total_bytes, field="memory (bytes)", source=f"{largest.name}: {largest.how}",
            high=INT64_MAX)  # fmt: skip
    load, e2e = _load_time(src, opts, weights_bytes), e2e_p99(src)
    pod_seconds(load.value, what="model load time", source=load.source)
    pod_seconds(e2e.value, what="p99 end-to-end (preStop drain)", source=e2e.source)
    timing: PodTiming = pod_timing(load, e2e)
    cmd: EngineCommand = engine_command(
        lock, model_path=opts.model_path, shutdown_timeout_s=SHUTDOWN_S
    )
    out = Rendered()
    if lay.num_nodes > 1:
        out.files["leaderworkerset.yaml"] = [
            leader_worker_set(lay, cmd, budget, timing, warm_prefix_gate=opts.warm_prefix_gate)
        ]
    else:
        out.files["deployment.yaml"] = [
            deployment(lay, cmd, budget, timing, warm_prefix_gate=opts.warm_prefix_gate)
        ]
    out.files["service.yaml"] = [service(lay, cmd)]
    selector = (
        check_selector(opts.metric_selector)
        if opts.metric_selector
        else f"namespace={label_value(lay.namespace)},model_name={label_value(lock.model.id)}"
    )
    signals = _checked_signals(src)
    if opts.autoscaler == "hpa":
        out.files["hpa.yaml"] = [hpa(lay, signals)]
    elif opts.autoscaler == "keda":
        out.files["keda-scaledobject.yaml"] = [
            keda_scaled_object(lay, signals, prometheus_url=opts.prometheus_url, selector=selector)
        ]
    if lay.replicas > 1 or lay.max_replicas > 1:
        out.files["inferencepool.yaml"] = [inference_pool(lay, cmd)]
        out.files["epp-config.yaml"] = [epp_config_map(lay, block_size=lock.block_size.value or 16)]
    policy = lock.prefix_caching.value
    rules: RuleSet = build_rules(
        src,
        AlertOptions(
            engine=engine,
            service=name,
            selector=selector,
            alert_for=opts.alert_for,
            rate_window=opts.rate_window,
            kv_high_water=opts.kv_high_water,
            salt_required=policy is not None and policy.enabled and policy.salt != "none",
        ),
    )
    out.rules = rule_file(rules, name=name)
    out.readme = readme_text(
        src,
        lay=lay,
        cmd=cmd,
        budget=budget,
        timing=timing,
        signals=signals,
        rules=rules,
        image_how=image_how,
        files=[*out.files, "alerts.rules.yaml"],
        autoscaler=opts.autoscaler,
        warm_prefix_gate=opts.warm_prefix_gate,
        placement_lines=[
            *weights.lines,
            "node selector: "
            + (", ".join(f"`{k}: {v}`" for k, v in placement.node_selector.items()) or "none")
            + f" ({placement.source})",
        ],
    )
    return out


def write_deploy(rendered: Rendered, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for filename, docs in rendered.files.items():
        path = out_dir / filename
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
        paths.append(path)
    rules = out_dir / "alerts.rules.yaml"
    rules.write_text(yaml.safe_dump(rendered.rules, sort_keys=False, width=200), encoding="utf-8")
    readme = out_dir / "README.md"
    readme.write_text(rendered.readme, encoding="utf-8")
    return [*paths, rules, readme]
