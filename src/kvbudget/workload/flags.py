"""Build a ``WorkloadSpec`` from the common CLI flags (``sim``, ``bench``).

``workload_from_flags`` maps the flags one to one (names as in the commands' ``--help``):

- ``--requests N`` -> ``num_requests``; ``--duration S`` -> ``duration_s``;
- ``--rate R`` (open loop, ``--arrival poisson|gamma|constant``, ``--cv`` for gamma) or
  ``--concurrency C`` (closed loop) — not both; neither = closed loop of 1;
  ``--arrival burst`` sends all ``--requests`` at once;
- ``--input-tokens`` / ``--output-tokens`` -> fixed lengths;
- ``--prefix-groups G`` and ``--shared-prefix-tokens T`` -> ``G`` groups of ``T`` shared
  tokens with Zipf popularity (``--zipf-s``); ``T`` without ``G`` means one group;
- ``--tenants K`` -> tenants ``tenant-0 .. tenant-{K-1}``, ``--salt none|per_tenant``.
"""

from __future__ import annotations

from typing import Any

from kvbudget.errors import ConfigError
from kvbudget.workload.spec import WorkloadSpec, workload_from_dict


def workload_from_flags(
    *,
    requests: int | None = None,
    duration_s: float | None = None,
    rate: float | None = None,
    concurrency: int | None = None,
    arrival: str | None = None,
    cv: float = 1.0,
    input_tokens: int = 1024,
    output_tokens: int = 128,
    prefix_groups: int = 0,
    shared_prefix_tokens: int = 0,
    zipf_s: float = 1.0,
    tenants: int = 1,
    salt: str = "none",
    cell_id: str | None = None,
) -> WorkloadSpec:
    """The ``WorkloadSpec`` the flags describe (one-line ``ConfigError`` on bad input)."""
    if rate is not None and concurrency is not None:
        raise ConfigError(
            f"--rate {rate} and --concurrency {concurrency} both given; use --rate for open "
            "loop or --concurrency for closed loop, not both",
            field="rate",
        )
    arrivals: dict[str, Any]
    if arrival == "burst":
        arrivals = {"kind": "burst"}
    elif rate is not None:
        kind = arrival or "poisson"
        if kind not in ("poisson", "gamma", "constant"):
            raise ConfigError(
                f"--arrival {kind} does not take --rate; use poisson, gamma or constant",
                field="arrival",
            )
        arrivals = {"kind": kind, "rate_per_s": rate}
        if kind == "gamma":
            arrivals["cv"] = cv
    else:
        if arrival not in (None, "closed"):
            raise ConfigError(
                f"--arrival {arrival} needs --rate R (requests per second)", field="rate"
            )
        arrivals = {"kind": "closed", "concurrency": concurrency or 1}
    groups = prefix_groups or (1 if shared_prefix_tokens else 0)
    if groups and not shared_prefix_tokens:
        raise ConfigError(
            f"--prefix-groups {groups} needs --shared-prefix-tokens T (tokens per group)",
            field="shared_prefix_tokens",
        )
    if tenants < 1:
        raise ConfigError(f"--tenants {tenants} must be >= 1", field="tenants")
    names = [f"tenant-{i}" for i in range(tenants)] if tenants > 1 else ["default"]
    data: dict[str, Any] = {
        "num_requests": requests,
        "duration_s": duration_s,
        "arrivals": arrivals,
        "input_tokens": {"kind": "fixed", "value": input_tokens},
        "output_tokens": {"kind": "fixed", "value": output_tokens},
        "prefix": {
            "num_groups": groups,
            "group_prefix_tokens": shared_prefix_tokens,
            "zipf_s": zipf_s,
        },
        "tenants": {"names": names, "salt": salt},
        "cell_id": cell_id,
    }
    return workload_from_dict(data)
