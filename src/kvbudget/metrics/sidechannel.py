"""The timing side-channel test of the isolation audit, declared before the run.

Given the TTFTs of the "hit" arm (attacker prompt sharing a prefix with the victim's) and
of the control arm (victim sent an unrelated prompt of the same length), test whether hit
TTFTs are stochastically *smaller* than control TTFTs:

- one-sided Mann–Whitney (``alternative="less"`` on hit vs control) and one-sided
  two-sample KS (hit's CDF above control's), each at the stated ``alpha``;
- the two p-values Holm-adjusted together, so the pair keeps a family-wise error ``alpha``;
- effect size ``auc = P(control > hit) + P(tie)/2`` (0.5 = no effect, 1 = every hit faster);
- ``mde_auc``: the smallest such AUC the Mann–Whitney test detects at ``alpha`` with
  ``power`` for these sample sizes (Noether; see docs/statistics.md).

``detected`` is true when either Holm-adjusted p-value is at or below ``alpha``. The verdict
(``leak_detected`` / ``no_leak_detected`` at ``mde_auc`` / ``inconclusive``) also needs the
positive control and the cached-token counts, and belongs to the audit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from kvbudget.metrics.stats import holm, ks_one_sided, mann_whitney, min_detectable_auc


@dataclass(frozen=True, slots=True)
class SideChannelTest:
    n_hit: int
    n_control: int
    alpha: float
    power: float
    p_mann_whitney: float
    p_ks: float
    p_mann_whitney_holm: float
    p_ks_holm: float
    auc: float
    mde_auc: float
    detected: bool

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def timing_side_channel(
    hit_s: Sequence[float] | np.ndarray,
    control_s: Sequence[float] | np.ndarray,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> SideChannelTest:
    """Are hit-arm latencies smaller than control-arm latencies? (see module doc)."""
    mw = mann_whitney(hit_s, control_s, alternative="less")
    ks = ks_one_sided(hit_s, control_s, x_smaller=True)
    adj = holm([mw.p_value, ks.p_value], alpha=alpha)
    return SideChannelTest(
        n_hit=mw.n_x,
        n_control=mw.n_y,
        alpha=alpha,
        power=power,
        p_mann_whitney=mw.p_value,
        p_ks=ks.p_value,
        p_mann_whitney_holm=adj.adjusted[0],
        p_ks_holm=adj.adjusted[1],
        auc=1.0 - mw.auc,
        mde_auc=min_detectable_auc(mw.n_x, mw.n_y, alpha=alpha, power=power),
        detected=any(adj.reject),
    )
