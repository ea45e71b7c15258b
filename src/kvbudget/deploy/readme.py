"""``DIR/README.md`` of ``kvbudget deploy``: where every number in the manifests came from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.deploy.pods import TOPOLOGY_NOTES, WARM_PREFIX_GATE

if TYPE_CHECKING:
    from kvbudget.deploy.alerts import RuleSet
    from kvbudget.deploy.autoscaling import ScaleSignals
    from kvbudget.deploy.engine_args import EngineCommand
    from kvbudget.deploy.manifests import Layout
    from kvbudget.deploy.memory import HostBudget
    from kvbudget.deploy.pods import PodTiming
    from kvbudget.deploy.source import DeploySource


def _shell(argv: tuple[str, ...]) -> str:
    import shlex

    lines: list[str] = []
    for arg in argv:
        if (
            lines and not arg.startswith("-") and lines[-1].startswith("-") and " " not in lines[-1]
        ) or (lines and not lines[-1].startswith("-") and not arg.startswith("-")):
            lines[-1] += " " + shlex.quote(arg)
        else:
            lines.append(shlex.quote(arg))
    return " \\\n    ".join(lines)


def readme_text(
    src: DeploySource,
    *,
    lay: Layout,
    cmd: EngineCommand,
    budget: HostBudget,
    timing: PodTiming,
    signals: ScaleSignals,
    rules: RuleSet,
    image_how: str,
    files: list[str],
    autoscaler: str,
    warm_prefix_gate: bool,
    placement_lines: list[str] | None = None,
) -> str:
    lock = src.plan.lock
    out: list[str] = [f"# {lay.name}: manifests and alert rules from kvbudget", ""]
    out.append(
        f"- Source: {src.origin} `{src.path.name}` (plan sha256 `{src.plan.canonical_sha256()[:16]}…`)."
    )
    if src.verdict is not None:
        out.append(
            f"- Acceptance verdict: **{src.verdict}**"
            + (
                ""
                if src.verdict == "pass"
                else " — not a pass: these manifests carry "
                "numbers that were not accepted on the real engine, hardware and load"
            )
        )
        for reason in (src.result.verdict_reasons if src.result else [])[:4]:
            out.append(f"  - {reason}")
    out.append(f"- Figures: {src.provenance}.")
    out.append("- Rendered only: kvbudget deploy ran no load and contacted no cluster.")
    out += ["", "Files: " + ", ".join(f"`{f}`" for f in files) + ".", ""]

    out += ["## Engine command", "", "```sh", _shell(cmd.argv), "```", ""]
    out += ["| flag | from |", "|---|---|"]
    out += [f"| `{flag}` | {where} |" for flag, where in cmd.sources.items()]
    out += [f"- {note}" for note in cmd.notes]
    out += ["", f"Image: `{lay.image}` ({image_how}).", ""]

    out += ["## Pod", ""]
    if placement_lines:
        out += [f"- {line}" for line in placement_lines]
        out += [""]
    gpus = (lock.tensor_parallel.value or 1) * (lock.pipeline_parallel.value or 1)
    if lay.num_nodes > 1:
        out.append(
            f"- Multi-node: TP x PP = {gpus} GPUs > {lay.gpus_per_pod} per node: a LeaderWorkerSet "
            f"of {lay.num_nodes} pods per replica, `nvidia.com/gpu: {lay.gpus_per_pod}` each "
            "(a StatefulSet per group with a headless Service works too; LWS restarts the "
            "group together)."
        )
    else:
        out.append(
            f"- `nvidia.com/gpu: {lay.gpus_per_pod}` = TP {lock.tensor_parallel.value or 1} x PP {lock.pipeline_parallel.value or 1}."
        )
    out.append(f"- Replicas: {lay.replicas} (autoscaler up to {lay.max_replicas}).")
    out.append(f"- CPU: {budget.cpu} ({budget.cpu_how}); requests = limits (Guaranteed QoS).")
    out += ["- Memory (host DRAM; the GPU count reserves none):", ""]
    out += [f"  - {line}" for line in budget.lines()]
    out += ["", "Probes and shutdown:", ""]
    out += [f"- {line}" for line in timing.lines()]
    out.append(f"- readinessProbe and livenessProbe: `GET {cmd.health_path}` on the engine port.")
    out.append(
        f"- Warm-prefix readiness: readiness gate `{WARM_PREFIX_GATE}` "
        + (
            "is set: a warm-up job must patch the pod's condition to True after sending the "
            "shared prefixes; the health endpoint does not know about cache warmth."
            if warm_prefix_gate
            else "not set (--warm-prefix-gate adds it; the health endpoint says nothing about "
            "cache warmth)."
        )
    )
    out.append(
        "- A replica that turns Ready still has a cold prefix cache; the rolling update adds one "
        "(maxSurge 1, maxUnavailable 0) before retiring one."
    )
    if lay.gpus_per_pod >= 4:
        out += ["", f"### Topology ({lay.gpus_per_pod}-GPU pod)", ""]
        out += [f"- {note}" for note in TOPOLOGY_NOTES]
        out += [
            "",
            "Kubelet settings (node configuration, not part of these manifests):",
            "",
            "```yaml",
            "cpuManagerPolicy: static",
            "topologyManagerPolicy: restricted   # single-numa-node can refuse admission",
            "topologyManagerScope: pod",
            "memoryManagerPolicy: Static",
            'reservedSystemCPUs: "0-1"',
            "```",
        ]

    out += ["", "## Autoscaling", ""]
    out.append(f"- Kind: {autoscaler}.")
    out.append(f"- Waiting requests per replica: {signals.waiting_per_pod.text()}.")
    if signals.ttft_target_s is not None:
        out.append(
            f"- TTFT p95 target: {signals.ttft_target_s.text(' s')} (recording rule `kvbudget:ttft_seconds:p95`)."
        )
    if signals.queue_target_s is not None:
        out.append(
            f"- Queue time p95 target: {signals.queue_target_s.text(' s')} (recording rule `kvbudget:queue_seconds:p95`)."
        )
    out.append(
        "- Prefix hits change the work per request: the same request rate costs less prefill "
        "when hits rise and more when they fall (a template change, a cold replica), so scale "
        "on queue and latency signals, not on request rate or GPU utilisation."
    )
    if autoscaler == "hpa":
        out.append(
            "- The HPA reads custom metrics through prometheus-adapter: map "
            "`vllm:num_requests_waiting` to `vllm_num_requests_waiting` and the recording rules "
            "`kvbudget:ttft_seconds:p95` / `kvbudget:queue_seconds:p95` to "
            "`kvbudget_ttft_seconds_p95` / `kvbudget_queue_seconds_p95` (per pod)."
        )
    if "inferencepool.yaml" in files:
        out += [
            "",
            "## Routing (more than one replica)",
            "",
            "- `inferencepool.yaml`: InferencePool `inference.networking.k8s.io/v1` selecting the "
            "engine pods; `failureMode: FailOpen` keeps serving when the endpoint picker is down.",
            "- `epp-config.yaml`: the endpoint picker's scorers: prefix-cache (weight 2) with "
            "queue and KV-utilisation scorers (weight 1 each) as the load fallback, so a replica "
            "with the prefix but a long queue loses to an idle one. Plugin names as in the "
            "Gateway API Inference Extension docs; check them against your EPP version. An "
            "InferencePool alone enables no prefix-aware routing: it needs a compatible Gateway "
            "and a deployed endpoint picker.",
        ]

    out += [
        "",
        "## Alerts (`alerts.rules.yaml`)",
        "",
        "| alert | class | threshold (what it is) |",
        "|---|---|---|",
    ]
    out += [f"| {name} | {cls} | {thr} |" for name, (cls, thr) in rules.thresholds.items()]
    if rules.skipped:
        out += ["", "Not rendered:", ""]
        out += [f"- {s}" for s in rules.skipped]
    out += [
        "",
        "Labels carry only `namespace`, `model_name`, `service`, `severity` and `class`: no "
        "prompt, user, tenant or request id. A high prefix hit rate is never a health signal "
        'on its own; the one rule reading it is a security "investigate" signal.',
        "Series engines do not export are a contract: `kvbudget_canary_failures_total` "
        "(written by `kvbudget canary --metrics-textfile`), `kvbudget_cross_tenant_cached_tokens_total`, "
        "`kvbudget_requests_without_cache_salt_total` (your gateway) and "
        "`kvbudget_cache_cleanup_failures_total` (your cleanup jobs).",
        "",
        "Check them: `promtool check rules alerts.rules.yaml`.",
        "",
    ]
    return "\n".join(out)
