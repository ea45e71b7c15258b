"""What the sim target's KV offload tiers did during one cell (the figures
:mod:`kvbudget.accept.judge.tier_checks` summarizes and checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kvbudget.sim.tiers import TierStack

#: the tier whose capacity the host-memory stop condition reads
HOST_TIER = "cpu"


class TierMeter:
    """Per-cell deltas and peaks of a :class:`TierStack` (built at the start of a cell)."""

    def __init__(self, stack: TierStack) -> None:
        self.stack = stack
        self._written = sum(t.bytes_written for t in stack.tiers)
        self._read = sum(t.bytes_read for t in stack.tiers)
        self._busy = [t.busy_s for t in stack.tiers]
        self._num_waits = len(stack.reload_waits_s)
        self._declined = stack.num_declined_reloads
        self._host = next((t for t in stack.tiers if t.config.name == HOST_TIER), None)
        self._host_evictions = self._host.num_evictions if self._host is not None else 0
        self.peak_host_bytes = self._host_bytes()

    def _host_bytes(self) -> int:
        return 0 if self._host is None else len(self._host.blocks) * self._host.block_bytes

    def observe(self) -> None:
        """Call after each engine step."""
        self.peak_host_bytes = max(self.peak_host_bytes, self._host_bytes())

    def counters(self, duration_s: float) -> dict[str, float]:
        st = self.stack
        waits = st.reload_waits_s[self._num_waits :]
        out: dict[str, float] = {
            "tier_bytes_written": float(sum(t.bytes_written for t in st.tiers) - self._written),
            "tier_bytes_read": float(sum(t.bytes_read for t in st.tiers) - self._read),
            "tier_num_reloads": float(len(waits)),
            "tier_declined_reloads": float(st.num_declined_reloads - self._declined),
        }
        busy_s = max(t.busy_s - b for t, b in zip(st.tiers, self._busy, strict=True))
        out["tier_link_busy_s"] = busy_s
        if duration_s > 0:
            out["tier_link_busy_fraction"] = busy_s / duration_s
        if waits:
            out["tier_reload_wait_p95_s"] = float(np.percentile(waits, 95))
        if self._host is not None:
            out["tier_host_capacity_bytes"] = float(self._host.config.capacity_bytes)
            out["tier_host_peak_bytes"] = float(self.peak_host_bytes)
            out["tier_host_evictions_blocks"] = float(
                self._host.num_evictions - self._host_evictions
            )
        return out
