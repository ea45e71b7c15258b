"""The Prometheus rule file: recording rules for the autoscaler and alerts in the seed's four
classes (capacity, performance, quality, security).

Series names are the engine's own (vLLM 0.32.0 ``vllm/v1/metrics/loggers.py``; SGLang and
llama.cpp as in docs/metrics-mapping.md). Counters carry prometheus_client's ``_total`` suffix.
Aggregations keep only ``namespace`` and ``model_name`` (bounded cardinality: no pod churn in
alert labels, and no prompt, user, tenant or request id in any label). A high prefix hit rate is
never treated as health: the one rule that reads it is a security "investigate" signal.

Series that engines do not export (canary failures, cross-tenant hits, requests without a salt,
cleanup failures) are named here as a contract: ``kvbudget canary --metrics-textfile`` writes
the canary ones; the gateway and the cleanup jobs must export the others under these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbudget.deploy.engines.registry import SERIES_KEYS, deploy_engine
from kvbudget.deploy.promql import label_value, template_literal
from kvbudget.deploy.source import (
    DeploySource,
    accepted_peak,
    accepted_queue_p99,
    ceiling,
    preemption_threshold,
    waiting_threshold,
)

GROUP_BY = "namespace, model_name"
DEFAULT_KV_HIGH_WATER = 0.90


@dataclass(frozen=True, slots=True)
class AlertOptions:
    engine: str
    service: str
    selector: str
    alert_for: str = "10m"
    rate_window: str = "5m"
    kv_high_water: float = DEFAULT_KV_HIGH_WATER
    salt_required: bool = True


@dataclass(slots=True)
class RuleSet:
    rules: list[dict[str, Any]] = field(default_factory=list)
    recording: list[dict[str, Any]] = field(default_factory=list)
    #: alert name -> (class, threshold figure text)
    thresholds: dict[str, tuple[str, str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def _alert(
    rs: RuleSet,
    name: str,
    cls: str,
    expr: str,
    *,
    for_: str,
    severity: str,
    summary: str,
    threshold: str,
    exporter: str | None = None,
) -> None:
    """One alert rule; ``exporter`` says what exports a series no engine does (the rule is a
    contract until something exports it under that name)."""
    annotations = {
        "summary": template_literal(summary),
        "threshold": template_literal(threshold),
        "runbook": "see README.md in the kvbudget deploy output, section Alerts",
    }
    if exporter is not None:
        annotations["exporter"] = template_literal(exporter)
    rs.rules.append(
        {
            "alert": name,
            "expr": expr,
            "for": for_,
            "labels": {"severity": severity, "class": cls},
            "annotations": annotations,
        }
    )
    rs.thresholds[name] = (cls, threshold)


def _quantile(q: float, bucket: str, sel: str, window: str, by: str = GROUP_BY) -> str:
    return f"histogram_quantile({q:g}, sum by ({by}, le) (rate({bucket}{{{sel}}}[{window}])))"


def build_rules(src: DeploySource, opts: AlertOptions) -> RuleSet:
    entry = deploy_engine(opts.engine)  # a name with no entry: one line naming the known ones
    series = {key: entry.series_of(key) for key in SERIES_KEYS}
    sel, win, for_ = opts.selector, opts.rate_window, opts.alert_for
    rs = RuleSet()
    svc = {"service": opts.service}

    # --- recording rules (per pod, for the autoscaler) --------------------------------------
    for key, record in (
        ("ttft_bucket", "kvbudget:ttft_seconds:p95"),
        ("queue_bucket", "kvbudget:queue_seconds:p95"),
    ):
        bucket = series[key]
        if bucket is not None:
            rs.recording.append(
                {
                    "record": record,
                    "expr": _quantile(0.95, bucket, sel, win, by="namespace, pod, model_name"),
                }
            )

    # --- capacity --------------------------------------------------------------------------
    if series["kv_usage"]:
        peak = accepted_peak(src, "kv_usage")
        note = f"; accepted peak mean {peak.text()}" if peak else ""
        _alert(
            rs,
            "KVCacheUsageHighWater",
            "capacity",
            f"max by ({GROUP_BY}) ({series['kv_usage']}{{{sel}}}) > {opts.kv_high_water:g}",
            for_=for_,
            severity="warning",
            summary=f"KV cache usage above {opts.kv_high_water:.0%} for {for_}",
            threshold=f"{opts.kv_high_water:g} (assumed high water, --kv-usage-high-water){note}",
        )
    else:
        rs.skipped.append(f"KVCacheUsageHighWater: {opts.engine} exports no KV usage gauge")
    if series["preemptions"]:
        limit = preemption_threshold(src)
        _alert(
            rs,
            "KVCachePreemptions",
            "capacity",
            f"sum by ({GROUP_BY}) (rate({series['preemptions']}{{{sel}}}[{win}])) > {limit.value:g}",
            for_=for_,
            severity="warning",
            summary=f"preemptions above the highest accepted load's rate for {for_} (KV blocks "
            "short: more load than was accepted)",
            threshold=limit.text(" /s"),
        )
    else:
        rs.skipped.append(f"KVCachePreemptions: {opts.engine} exports no preemption counter")
    wlimit = waiting_threshold(src)
    _alert(
        rs,
        "RequestsWaiting",
        "capacity",
        f"avg by ({GROUP_BY}) ({series['waiting']}{{{sel}}}) > {wlimit.value:g}",
        for_=for_,
        severity="warning",
        summary=f"requests waiting per replica above the highest accepted load's queue for {for_}",
        threshold=wlimit.text(" requests per replica"),
    )

    # --- performance -----------------------------------------------------------------------
    for metric, key in (("ttft_s", "ttft_bucket"), ("tpot_s", "tpot_bucket")):
        declared = ceiling(src, metric)  # type: ignore[arg-type]
        bucket = series[key]
        label = metric.split("_")[0].upper()
        if bucket is None or declared is None:
            rs.skipped.append(
                f"{label}High: "
                + (
                    "no histogram from " + opts.engine
                    if bucket is None
                    else f"no {metric} ceiling in the plan"
                )
            )
            continue
        pct, limit_s = declared
        q = int(pct[1:]) / 100  # the ceiling's own percentile: a p95 ceiling is checked on p95
        _alert(
            rs,
            f"{label}{pct.upper()}High",
            "performance",
            f"{_quantile(q, bucket, sel, win)} > {limit_s:g}",
            for_=for_,
            severity="critical",
            summary=f"{label} {pct} above the accepted ceiling for {for_}",
            threshold=f"{limit_s:g} s (declared: plan stop.{metric}.{pct}, compared with the "
            f"engine histogram's {pct})",
        )
    queue = accepted_queue_p99(src)
    if series["queue_bucket"] and queue is not None:
        qlimit = max(queue.value * 2, 0.1)
        _alert(
            rs,
            "QueueTimeP99High",
            "performance",
            f"{_quantile(0.99, series['queue_bucket'], sel, win)} > {qlimit:g}",
            for_=for_,
            severity="warning",
            summary="queue time p99 above twice the accepted level",
            threshold=f"{qlimit:g} s = max(2 x {queue.text(' s')}, 0.1 s)",
        )
    else:
        rs.skipped.append(
            "QueueTimeP99High: "
            + (
                "no accepted queue time"
                if series["queue_bucket"]
                else f"{opts.engine} exports no queue histogram"
            )
        )

    # --- quality ---------------------------------------------------------------------------
    svc_sel = f"service={label_value(opts.service)}"
    _alert(
        rs,
        "CanaryFailed",
        "quality",
        f"increase(kvbudget_canary_failures_total{{{svc_sel}}}[1h]) > 0",
        for_="0m",
        severity="critical",
        summary="a kvbudget canary run failed its gate (quality or stop conditions)",
        threshold="any failure (kvbudget canary --metrics-textfile)",
        exporter="kvbudget canary --metrics-textfile, read by node_exporter's textfile collector",
    )
    _alert(
        rs,
        "CanaryUntested",
        "quality",
        f"increase(kvbudget_canary_untested_total{{{svc_sel}}}[1h]) > 0",
        for_="0m",
        severity="critical",
        summary="a kvbudget canary run could not judge the candidate (too few requests "
        "completed, no baseline cell, or figures of another kind): the rollout gate is blind",
        threshold="any untested run (kvbudget canary --metrics-textfile)",
        exporter="kvbudget canary --metrics-textfile, read by node_exporter's textfile collector",
    )

    # --- security --------------------------------------------------------------------------
    _alert(
        rs,
        "CrossTenantPrefixHit",
        "security",
        f"increase(kvbudget_cross_tenant_cached_tokens_total{{{svc_sel}}}[1h]) > 0",
        for_="0m",
        severity="critical",
        summary="cached tokens served across tenants: stop cross-request sharing",
        threshold="any (isolation audit / gateway counter)",
        exporter="nothing in kvbudget or the engine exports kvbudget_cross_tenant_cached_tokens_total: your gateway must, "
        "under this name; until one does this rule never fires",
    )
    if opts.salt_required:
        _alert(
            rs,
            "RequestsWithoutCacheSalt",
            "security",
            f"increase(kvbudget_requests_without_cache_salt_total{{{svc_sel}}}[{win}]) > 0",
            for_="0m",
            severity="critical",
            summary="requests reached the engine without cache_salt where salting is required",
            threshold="any (gateway counter; lock.prefix_caching.salt is not 'none')",
            exporter="nothing in kvbudget or the engine exports kvbudget_requests_without_cache_salt_total: your gateway must, "
            "under this name; until one does this rule never fires",
        )
    _alert(
        rs,
        "CacheCleanupFailed",
        "security",
        f"increase(kvbudget_cache_cleanup_failures_total{{{svc_sel}}}[1h]) > 0",
        for_="0m",
        severity="critical",
        summary="a cache cleanup (reset_prefix_cache, tier purge, deletion job) failed",
        threshold="any (cleanup job counter)",
        exporter="nothing in kvbudget or the engine exports kvbudget_cache_cleanup_failures_total: your cleanup job must, "
        "under this name; until one does this rule never fires",
    )
    if series["prefix_hits"] and series["prefix_queries"]:
        hits, queries = series["prefix_hits"], series["prefix_queries"]
        _alert(
            rs,
            "PrefixHitRateUnexpectedlyHigh",
            "security",
            f"(sum by ({GROUP_BY}) (rate({hits}{{{sel}}}[{win}])) / sum by ({GROUP_BY}) "
            f"(rate({queries}{{{sel}}}[{win}]))) > 0.98 and sum by ({GROUP_BY}) "
            f"(rate({queries}{{{sel}}}[{win}])) > 0",
            for_=for_,
            severity="info",
            summary="prefix hit rate near 1: check for stale templates, over-sharing or probing "
            "(a high hit rate is not a health signal)",
            threshold="0.98 (assumed)",
        )
    for rule in rs.rules:
        rule["labels"].update(svc)
    return rs


def rule_file(rs: RuleSet, *, name: str) -> dict[str, Any]:
    groups: list[dict[str, Any]] = []
    if rs.recording:
        groups.append({"name": f"{name}.recording", "rules": rs.recording})
    for cls in ("capacity", "performance", "quality", "security"):
        rules = [r for r in rs.rules if r["labels"]["class"] == cls]
        if rules:
            groups.append({"name": f"{name}.{cls}", "rules": rules})
    return {"groups": groups}
