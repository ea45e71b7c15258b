"""``kvbudget deploy PLAN_OR_REPORT --out DIR``: Kubernetes manifests and Prometheus alert rules."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("deploy")
@click.argument("source", metavar="PLAN_OR_REPORT", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("deploy"),
    show_default=True,
    help="Directory for the manifests, alerts.rules.yaml and README.md.",
)
@click.option("--namespace", default="default", show_default=True, help="Kubernetes namespace.")
@click.option(
    "--service",
    "name",
    default=None,
    help="Service name: the objects' name and the alerts' service label (default: the plan name "
    "as a DNS label).",
)
@click.option("--image", default=None, help="Engine image (default: lock.engine.container).")
@click.option(
    "--model-path",
    default=None,
    help="Model path or id the engine loads inside the pod (default: lock.model.id).",
)
@click.option(
    "--model-pvc",
    default=None,
    help="PersistentVolumeClaim holding the weights, mounted read-only at --model-mount-path.",
)
@click.option(
    "--model-host-path",
    default=None,
    help="Directory on every GPU node holding the weights (hostPath), mounted read-only.",
)
@click.option(
    "--model-mount-path",
    default=None,
    help="Where the weights are mounted in the pod (default: the model path's directory, else "
    "/models).",
)
@click.option(
    "--hf-token-secret",
    default="hf-token",
    show_default=True,
    help="Secret whose key 'token' becomes HF_TOKEN when the model is a hub id (optional).",
)
@click.option(
    "--hf-cache-pvc",
    default=None,
    help="PersistentVolumeClaim for the hub download cache (default: an emptyDir).",
)
@click.option(
    "--gpu-product",
    default=None,
    help="nvidia.com/gpu.product node label (default: derived from lock.gpu.type as GPU "
    "Feature Discovery writes it).",
)
@click.option(
    "--replicas",
    type=click.IntRange(min=1),
    default=None,
    help="Replicas (default: lock.gpu.count / (TP x PP)).",
)
@click.option(
    "--max-replicas",
    type=click.IntRange(min=1),
    default=None,
    help="Autoscaler ceiling (default: 2 x replicas).",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="GPUs one node offers; more TP x PP than this renders a LeaderWorkerSet.",
)
@click.option(
    "--autoscaler",
    type=click.Choice(["hpa", "keda", "none"]),
    default="hpa",
    show_default=True,
    help="HPA on custom metrics, a KEDA ScaledObject, or none.",
)
@click.option(
    "--prometheus-url",
    default="http://prometheus-operated.monitoring.svc:9090",
    show_default=True,
    help="Prometheus the KEDA triggers query.",
)
@click.option(
    "--load-time-s",
    type=click.FloatRange(min=1),
    default=None,
    help="Measured model load time (default: the report's rollback drill, else estimated).",
)
@click.option(
    "--weights-read-bytes-per-s",
    type=click.FloatRange(min=1),
    default=1e9,
    show_default=True,
    help="Assumed weight read speed for the load-time estimate.",
)
@click.option(
    "--shm-size",
    default=None,
    help="Size of /dev/shm for TP/PP (e.g. 8GiB; default 8GiB when TP x PP > 1).",
)
@click.option(
    "--sidecar-memory",
    default="512MiB",
    show_default=True,
    help="Memory of the pod's sidecars, counted in the memory limit.",
)
@click.option(
    "--warm-prefix-gate",
    is_flag=True,
    help="Add readiness gate kvbudget.io/warm-prefix (set by a warm-up job).",
)
@click.option(
    "--alert-for",
    default="10m",
    show_default=True,
    help="'for' duration of the capacity and performance alerts (Prometheus duration).",
)
@click.option(
    "--rate-window",
    default="5m",
    show_default=True,
    help="Window of rate() and histogram quantiles in the rules.",
)
@click.option(
    "--kv-usage-high-water",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=0.9,
    show_default=True,
    help="KV cache usage that counts as high water.",
)
@click.option(
    "--metric-selector",
    default=None,
    help="Label matchers for engine series (default: namespace and model_name).",
)
@click.option("--allow-failed", is_flag=True, help="Render a report whose verdict is fail.")
def deploy(
    source: Path,
    out_dir: Path,
    namespace: str,
    name: str | None,
    image: str | None,
    model_path: str | None,
    model_pvc: str | None,
    model_host_path: str | None,
    model_mount_path: str | None,
    hf_token_secret: str,
    hf_cache_pvc: str | None,
    gpu_product: str | None,
    replicas: int | None,
    max_replicas: int | None,
    gpus_per_node: int,
    autoscaler: str,
    prometheus_url: str,
    load_time_s: float | None,
    weights_read_bytes_per_s: float,
    shm_size: str | None,
    sidecar_memory: str,
    warm_prefix_gate: bool,
    alert_for: str,
    rate_window: str,
    kv_usage_high_water: float,
    metric_selector: str | None,
    allow_failed: bool,
) -> None:
    """Render Kubernetes manifests and Prometheus alert rules from an acceptance plan (YAML) or
    an accepted report.json: the engine's flags exactly as locked, the pod's GPU/CPU/memory
    budget with its arithmetic, probes and drain from the accepted timings, autoscaling on
    waiting requests and TTFT, an InferencePool for several replicas, and alerts in four
    classes. Renders only: no load runs, no cluster is contacted.
    """
    from kvbudget.deploy.model_source import ModelSourceOptions
    from kvbudget.deploy.render import DeployOptions, render_deploy, write_deploy
    from kvbudget.deploy.source import load_source
    from kvbudget.units import parse_bytes

    src = load_source(source, allow_failed=allow_failed)
    opts = DeployOptions(
        namespace=namespace,
        name=name,
        image=image,
        model_path=model_path,
        replicas=replicas,
        max_replicas=max_replicas,
        gpus_per_node=gpus_per_node,
        autoscaler=autoscaler,  # type: ignore[arg-type]
        prometheus_url=prometheus_url,
        load_time_s=load_time_s,
        weights_read_bytes_per_s=weights_read_bytes_per_s,
        shm_bytes=None if shm_size is None else parse_bytes(shm_size, field="--shm-size"),
        sidecar_bytes=parse_bytes(sidecar_memory, field="--sidecar-memory"),
        warm_prefix_gate=warm_prefix_gate,
        alert_for=alert_for,
        rate_window=rate_window,
        kv_high_water=kv_usage_high_water,
        metric_selector=metric_selector,
        model_source=ModelSourceOptions(
            model_pvc=model_pvc,
            model_host_path=model_host_path,
            model_mount_path=model_mount_path,
            hf_token_secret=hf_token_secret,
            hf_cache_pvc=hf_cache_pvc,
        ),
        gpu_product=gpu_product,
    )
    paths = write_deploy(render_deploy(src, opts), out_dir)
    for path in paths:
        click.echo(str(path))
