"""The isolation audit's timing test: power on a real shift, false positives at or below
alpha under the null (seeded repetitions)."""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.metrics.sidechannel import timing_side_channel
from kvbudget.metrics.stats import auc, min_detectable_auc


def test_detects_faster_hits() -> None:
    rng = np.random.default_rng(1)
    hit, control = rng.normal(0.09, 0.01, 60), rng.normal(0.10, 0.01, 60)
    res = timing_side_channel(hit, control, alpha=0.01)
    assert res.detected
    assert res.auc == pytest.approx(auc(control, hit))
    assert res.auc > res.mde_auc
    assert res.mde_auc == pytest.approx(min_detectable_auc(60, 60, alpha=0.01))
    assert res.p_mann_whitney_holm >= res.p_mann_whitney


def test_slower_hits_are_not_a_leak() -> None:
    rng = np.random.default_rng(2)
    res = timing_side_channel(rng.normal(0.2, 0.01, 50), rng.normal(0.1, 0.01, 50))
    assert not res.detected
    assert res.auc < 0.5


def test_false_positive_rate_at_most_alpha() -> None:
    rng = np.random.default_rng(3)
    alpha = 0.05
    runs = 300
    hits = sum(
        timing_side_channel(
            rng.lognormal(0, 0.3, 40), rng.lognormal(0, 0.3, 40), alpha=alpha
        ).detected
        for _ in range(runs)
    )
    # Holm keeps the family-wise rate <= alpha; allow binomial noise (sd ~ 0.0126 at 0.05)
    assert hits / runs <= alpha + 0.03
