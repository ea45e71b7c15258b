"""Every alert of the demo plan's rule file, tested with ``promtool test rules`` on synthetic
series: it fires just above its threshold and stays silent below it.

Thresholds by hand from examples/acceptance-demo.yaml: KV high water 0.9 (default), preemption
rate above 0/s and waiting per replica above 1 (a plan has no accepted load: any sustained
preemption, a sustained queue), TTFT p95 > 2 s (stop.ttft_s.p95 2.0, checked on p95, the
ceiling's own percentile), TPOT p95 > 0.06 s (stop.tpot_s.p95 0.060), hit rate > 0.98. Histogram
quantiles by hand: all observations in the bucket (a, b] give q-quantile a + q x (b - a).
promtool (Debian's prometheus package, scripts/ensure-prometheus.sh) must be installed: without
it these tests fail, they do not skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from kvbudget.cli.deploy import deploy
from tests.unit.deploy.conftest import DEMO_PLAN

SVC = "svc"
ENGINE = {"namespace": "ns", "model_name": "m"}
N = 40  # samples at 15 s: 10 minutes


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: run scripts/ensure-prometheus.sh (apt-get install prometheus)"
    return path


def _render(tmp_path: Path, *extra: str) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "deploy"
    args = [str(DEMO_PLAN), "--out", str(out), "--service", SVC, "--metric-selector",
            'model_name="m"', "--alert-for", "1m", "--rate-window", "1m", *extra]  # fmt: skip
    result = CliRunner().invoke(deploy, args)
    assert result.exit_code == 0, result.output
    path = out / "alerts.rules.yaml"
    return path, yaml.safe_load(path.read_text())


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def _hist(
    name: str, bounds: list[str], filled: str, labels: dict[str, str]
) -> list[dict[str, str]]:
    """Counts growing 10 per 15 s in every bucket from ``filled`` up (cumulative buckets)."""
    out = []
    reached = False
    for le in bounds:
        reached = reached or le == filled
        out.append(_series(name, {**labels, "le": le}, f"0+10x{N}" if reached else f"0+0x{N}"))
    return out


POD = {**ENGINE, "pod": "p0"}
SVC_LABELS = {"service": SVC}
TTFT = "vllm:time_to_first_token_seconds_bucket"
TPOT = "vllm:request_time_per_output_token_seconds_bucket"

Case = tuple[list[dict[str, str]], list[dict[str, str]], dict[str, str]]


def _flip(name: str, labels: dict[str, str], firing: str, silent: str) -> Case:
    """One series with values that fire the alert and values that keep it silent; an engine
    series' alert carries the engine labels, kvbudget's own the service label."""
    alert = ENGINE if labels is POD else labels
    return [_series(name, labels, firing)], [_series(name, labels, silent)], alert


def _hist_flip(name: str, bounds: list[str], firing: str, silent: str) -> Case:
    return _hist(name, bounds, firing, POD), _hist(name, bounds, silent, POD), ENGINE


#: alert -> (series that fire it, series that keep it silent, labels of the firing alert)
CASES: dict[str, Case] = {
    "KVCacheUsageHighWater": _flip("vllm:kv_cache_usage_perc", POD, f"0.95x{N}", f"0.85x{N}"),
    "KVCachePreemptions": _flip("vllm:num_preemptions_total", POD, f"0+5x{N}", f"7+0x{N}"),
    "RequestsWaiting": _flip("vllm:num_requests_waiting", POD, f"3x{N}", f"0x{N}"),
    # (2.5, 5]: p95 = 2.5 + 0.95 x 2.5 = 4.875 > 2;  (0, 1]: p95 = 0.95 < 2
    "TTFTP95High": _hist_flip(TTFT, ["1", "2.5", "5", "+Inf"], "5", "1"),
    # (0.05, 0.1]: p95 = 0.0975 > 0.06;  (0, 0.05]: p95 = 0.0475 < 0.06
    "TPOTP95High": _hist_flip(TPOT, ["0.05", "0.1", "+Inf"], "0.1", "0.05"),
    "CanaryFailed": _flip("kvbudget_canary_failures_total", SVC_LABELS, f"0 0 0 1x{N}", f"0x{N}"),
    "CanaryUntested": _flip("kvbudget_canary_untested_total", SVC_LABELS, f"0 0 0 1x{N}", f"0x{N}"),
    "CrossTenantPrefixHit": _flip(
        "kvbudget_cross_tenant_cached_tokens_total", SVC_LABELS, f"0 0 16x{N}", f"0x{N}"
    ),
    "RequestsWithoutCacheSalt": _flip(
        "kvbudget_requests_without_cache_salt_total", SVC_LABELS, f"0+1x{N}", f"4x{N}"
    ),
    "CacheCleanupFailed": _flip(
        "kvbudget_cache_cleanup_failures_total", SVC_LABELS, f"0 0 0 0 1x{N}", f"0x{N}"
    ),
    # 99 of 100 queried tokens hit: 0.99 > 0.98; 50 of 100: silent
    "PrefixHitRateUnexpectedlyHigh": (
        [
            _series("vllm:prefix_cache_hits_total", POD, f"0+99x{N}"),
            _series("vllm:prefix_cache_queries_total", POD, f"0+100x{N}"),
        ],
        [
            _series("vllm:prefix_cache_hits_total", POD, f"0+50x{N}"),
            _series("vllm:prefix_cache_queries_total", POD, f"0+100x{N}"),
        ],
        ENGINE,
    ),
}


def _rules_by_name(rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}


def _run(tmp_path: Path, rules_path: Path, tests: list[dict[str, Any]]) -> None:
    doc = {"rule_files": [str(rules_path)], "evaluation_interval": "15s", "tests": tests}
    test_file = tmp_path / "alerts.test.yaml"
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run(
        [_promtool(), "test", "rules", str(test_file)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_a_case_here(tmp_path: Path) -> None:
    _, rules = _render(tmp_path)
    assert set(_rules_by_name(rules)) == set(CASES)


def test_each_alert_fires_above_and_stays_silent_below(tmp_path: Path) -> None:
    path, rules = _render(tmp_path)
    by_name = _rules_by_name(rules)
    tests: list[dict[str, Any]] = []
    for name, (firing, silent, labels) in CASES.items():
        rule = by_name[name]
        expected = {**labels, **rule["labels"]}
        tests.append(
            {
                "interval": "15s",
                "input_series": firing,
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": name,
                        "exp_alerts": [
                            {"exp_labels": expected, "exp_annotations": rule["annotations"]}
                        ],
                    }
                ],
            }
        )
        tests.append(
            {
                "interval": "15s",
                "input_series": silent,
                "alert_rule_test": [{"eval_time": "5m", "alertname": name, "exp_alerts": []}],
            }
        )
    _run(tmp_path, path, tests)


def test_capacity_alert_waits_for_its_for_duration(tmp_path: Path) -> None:
    path, _ = _render(tmp_path)
    firing = CASES["KVCacheUsageHighWater"][0]
    # 'for: 1m': pending at 30 s, no alert yet
    tests = [
        {
            "interval": "15s",
            "input_series": firing,
            "alert_rule_test": [{"eval_time": "30s", "alertname": "KVCacheUsageHighWater", "exp_alerts": []}],
        }
    ]  # fmt: skip
    _run(tmp_path, path, tests)


def test_ttft_recording_rule_is_the_per_pod_p95(tmp_path: Path) -> None:
    path, _ = _render(tmp_path)
    # all observations in (2.5, 5]: p95 = 2.5 + 0.95 x 2.5 = 4.875
    tests = [
        {
            "interval": "15s",
            "input_series": _hist(TTFT, ["1", "2.5", "5", "+Inf"], "5", POD),
            "promql_expr_test": [
                {
                    "expr": "kvbudget:ttft_seconds:p95",
                    "eval_time": "5m",
                    "exp_samples": [
                        {"labels": 'kvbudget:ttft_seconds:p95{namespace="ns",pod="p0",model_name="m"}', "value": 4.875}
                    ],
                }
            ],
        }
    ]  # fmt: skip
    _run(tmp_path, path, tests)


def _label_names(expr: str) -> set[str]:
    names: set[str] = set()
    for group in re.findall(r"by \(([^)]*)\)", expr):
        names |= {n.strip() for n in group.split(",") if n.strip()}
    names |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!=|!~|=)\s*\"", expr))
    return names


def test_no_label_can_carry_identity_and_hit_rate_is_never_alone(tmp_path: Path) -> None:
    _, rules = _render(tmp_path)
    allowed = {"namespace", "model_name", "pod", "le", "service", "severity", "class"}
    for group in rules["groups"]:
        for rule in group["rules"]:
            used = _label_names(rule["expr"]) | set(rule.get("labels", {}))
            assert used <= allowed, (rule.get("alert") or rule.get("record"), used - allowed)
            if "prefix_cache_hits" in rule["expr"]:
                # the hit-rate rule is a security 'investigate' signal, never health
                assert rule["labels"]["class"] == "security"
                assert rule["labels"]["severity"] == "info"


def test_rules_on_series_nothing_exports_say_so(tmp_path: Path) -> None:
    """Issue #32 item 2: the security counters are a contract (a gateway, a cleanup job), not
    something kvbudget or vLLM exports; each such rule says who must export its series."""
    _, rules = _render(tmp_path)
    by_name = _rules_by_name(rules)
    for name in ("CrossTenantPrefixHit", "RequestsWithoutCacheSalt", "CacheCleanupFailed"):
        exporter = by_name[name]["annotations"]["exporter"]
        assert exporter.startswith("nothing in kvbudget or the engine exports kvbudget_"), name
        assert "never fires" in exporter
    for name in ("CanaryFailed", "CanaryUntested"):
        assert "kvbudget canary --metrics-textfile" in by_name[name]["annotations"]["exporter"]
    # series the engine exports need no such note
    assert "exporter" not in by_name["KVCacheUsageHighWater"]["annotations"]
