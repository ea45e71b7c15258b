"""Shared pytest configuration and small builders."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# An example's wall time on a shared two-core machine (a second xdist worker, an engine build in
# the background) says nothing about the code under test: no per-example deadline and no
# too_slow health check anywhere (a test's own @settings still sets its example count).
settings.register_profile("kvbudget", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kvbudget")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"
#: fixtures that run a Ray cluster: the session's in-process Ray, and a ``ray start --head``
RAY_FIXTURES = frozenset({"ray_local", "ray_head"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: ``-n auto --dist loadgroup``) the tests that run Ray
    share one worker, as in a serial run: one Ray per worker would start two clusters (and two
    ``ray_local`` sessions of 2 CPUs) on a two-core machine."""
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def ray_local():  # type: ignore[no-untyped-def]
    """One local Ray for the session (``ray.init(num_cpus=2)``); the test extra installs Ray,
    so a missing Ray fails here rather than skipping."""
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=128 * 1024 * 1024,
        )
    yield ray
    ray.shutdown()
