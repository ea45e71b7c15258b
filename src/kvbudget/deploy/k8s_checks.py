"""Names, integers and strings checked as the Kubernetes API checks them, before a file is
written: a value the API server would refuse is a one-line ConfigError naming where it came from.

Rules from Kubernetes' apimachinery ``pkg/util/validation/validation.go`` and the API types:

* a namespace is a DNS-1123 label: ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at most 63 characters;
* a Service name is a DNS-1035 label (a DNS-1123 label starting with a letter); kvbudget gives
  every object of one service that name (the ``-epp`` suffixes stay within 63);
* replicas, probe thresholds and periods, HPA and KEDA replica counts, ports and the
  LeaderWorkerSet size are ``int32`` (at most 2,147,483,647); ``terminationGracePeriodSeconds``
  and the preStop sleep are ``int64`` seconds the kubelet turns into a Go ``time.Duration``
  (int64 nanoseconds); kvbudget bounds every seconds figure it derives at
  :data:`MAX_POD_SECONDS` (a week: no serving drain or model load is longer);
* a quantity kvbudget writes (memory, CPU, GPUs, HPA targets) is at most 2^63-1 in its unit
  (``resource.Quantity.Value()`` is an int64);
* an image reference has no whitespace or control character;
* Kubernetes expands ``$(VAR)`` in a container's command and args and reduces ``$$`` to ``$``
  (API reference, Container.command): every ``$`` of a value kvbudget copies there (model path,
  served name, declared flags) is written ``$$``, so the engine receives it unchanged.
"""

from __future__ import annotations

import math
import re

from kvbudget.deploy.promql import shown
from kvbudget.errors import ConfigError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: kvbudget's bound on a drain, grace period or model load it writes (seconds, docs/limits.md)
MAX_POD_SECONDS = 7 * 86_400
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def check_namespace(value: str) -> str:
    if len(value) > 63 or not _DNS1123_LABEL.fullmatch(value):
        raise ConfigError(
            f"--namespace: {shown(value)} is not a Kubernetes namespace (a DNS-1123 label: "
            "lowercase letters, digits and '-', starting and ending with a letter or digit, at "
            "most 63 characters); e.g. --namespace inference",
            field="--namespace",
        )
    return value


def check_service_name(value: str, source: str) -> str:
    """``value`` (already lowercased by k8s_name) as a Service name (DNS-1035 label)."""
    if len(value) > 63 or not _DNS1035_LABEL.fullmatch(value):
        raise ConfigError(
            f"{source}: the object name {shown(value)} is not a Kubernetes Service name (a "
            "DNS-1035 label must start with a letter); give --service NAME starting with a "
            "letter, e.g. --service llama-8b",
            field=source,
        )
    return value


def check_image(value: str, source: str) -> str:
    if not value or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ConfigError(
            f"{source}: image {shown(value)} is empty or holds whitespace or a control "
            "character; Kubernetes refuses it; give a reference such as "
            "vllm/vllm-openai:v0.32.0",
            field=source,
        )
    return value


def k8s_int(value: float, *, field: str, source: str, low: int = 0, high: int = INT32_MAX) -> int:
    """``value`` (from ``source``) as an integer Kubernetes field bounded [low, high]."""
    finite = isinstance(value, int) or math.isfinite(value)
    if not finite or value < low or value > high:
        kind = {INT32_MAX: " (int32)", INT64_MAX: " (int64)"}.get(high, "")
        raise ConfigError(
            f"{field}: {_number(value)} from {source} is outside {low}..{high}{kind}, which "
            "Kubernetes accepts; fix the input it came from",
            field=field,
        )
    return int(value)


def _number(value: float) -> str:
    if isinstance(value, int):
        text = str(value)
        return text if len(text) <= 20 else f"{text[:6]}... ({len(text)} digits)"
    return f"{value:.6g}"


def pod_seconds(value: float, *, what: str, source: str) -> float:
    """A seconds figure (load time, p99 end-to-end) checked before probes and drains use it."""
    if not math.isfinite(value) or value < 0 or value > MAX_POD_SECONDS:
        raise ConfigError(
            f"{what}: {_number(value)} s from {source} is not between 0 and {MAX_POD_SECONDS} s "
            "(a week), the longest drain or load kvbudget deploy writes; fix the input",
            field=what,
        )
    return value


def command_literal(text: str) -> str:
    """``text`` as a container command element Kubernetes passes on unchanged (``$`` -> ``$$``)."""
    return text.replace("$", "$$")
