"""Shared pytest configuration and small builders."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"


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
