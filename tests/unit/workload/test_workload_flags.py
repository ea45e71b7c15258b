"""CLI flags -> WorkloadSpec."""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.errors import ConfigError
from kvbudget.workload.arrival_specs import ClosedLoopArrivals, GammaArrivals, PoissonArrivals
from kvbudget.workload.flags import workload_from_flags
from kvbudget.workload.spec import generate


def test_open_and_closed_loop() -> None:
    spec = workload_from_flags(requests=20, rate=4.0, input_tokens=64, output_tokens=8)
    assert isinstance(spec.arrivals, PoissonArrivals) and spec.arrivals.rate_per_s == 4.0
    reqs = generate(spec, np.random.default_rng(0))
    assert len(reqs) == 20 and {r.prompt_tokens for r in reqs} == {64}
    closed = workload_from_flags(requests=10, concurrency=3)
    assert closed.arrivals == ClosedLoopArrivals(concurrency=3)
    gamma = workload_from_flags(requests=5, rate=2.0, arrival="gamma", cv=3.0)
    assert isinstance(gamma.arrivals, GammaArrivals) and gamma.arrivals.cv == 3.0


def test_prefix_and_tenants() -> None:
    spec = workload_from_flags(
        requests=30,
        rate=5.0,
        input_tokens=100,
        shared_prefix_tokens=40,
        prefix_groups=3,
        tenants=2,
        salt="per_tenant",
    )
    reqs = generate(spec, np.random.default_rng(1))
    assert {r.prefix_group for r in reqs} <= {0, 1, 2}
    assert all(r.shared_prefix_tokens == 40 for r in reqs)
    assert {r.tenant for r in reqs} == {"tenant-0", "tenant-1"}
    one = workload_from_flags(requests=3, shared_prefix_tokens=16)
    assert one.prefix.num_groups == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"requests": 1, "rate": 1.0, "concurrency": 2}, "rate"),
        ({"requests": 1, "arrival": "poisson"}, "rate"),
        ({"requests": 1, "prefix_groups": 2}, "shared_prefix_tokens"),
        ({"requests": 1, "rate": 1.0, "arrival": "closed"}, "arrival"),
        ({"requests": 1, "tenants": 0}, "tenants"),
    ],
)
def test_flag_errors(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        workload_from_flags(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field
