"""Is a start/no-start verdict closer than what kvbudget had to estimate?

vLLM's own profile run measures every non-KV term; kvbudget computes most of them and estimates
the rest (``MemoryTerm.source == "estimated"``: the CUDA-graph pool, non-torch memory, ...).
When the margin of the verdict (the headroom left after one max-length request, or the gap it
misses by) is no larger than the estimated bytes, the estimates could turn it either way: the
verdict is a **close call**, stated with both sides and the engine log line that settles it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.engines.registry import engine_is
from kvbudget.capacity.memory import RankMemory
from kvbudget.engine_name import EngineName
from kvbudget.units import GiB

#: the engine log lines that settle a close call: vLLM prints the measured terms, then the pool
SETTLING_LOG_LINES = (
    "'Memory profiling takes ... peak activation ... non-torch ... CUDAGraph'",
    "'Available KV cache memory: ... GiB'",
)


@dataclass(frozen=True, slots=True)
class CloseCall:
    """The verdict's margin against the estimated inputs (per GPU of the tightest stage)."""

    fits: bool
    margin_bytes: int  # headroom when it fits, the shortfall when it does not
    estimated_bytes: int
    estimated_terms: tuple[str, ...]

    def text(self) -> str:
        side = (
            f"fits with {self.margin_bytes / GiB:.2f} GiB to spare"
            if self.fits
            else f"does not start, short by {self.margin_bytes / GiB:.2f} GiB"
        )
        other = "might not start" if self.fits else "might start"
        terms = ", ".join(self.estimated_terms)
        return (
            f"close call: {side}, but {self.estimated_bytes / GiB:.2f} GiB of the inputs are "
            f"estimates ({terms}), so it {other}; the engine's {' then '.join(SETTLING_LOG_LINES)} "
            "settle it (pass the logged figures with --non-torch-bytes, --cudagraph-bytes, "
            "--activation-bytes)"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "fits": self.fits,
            "margin_bytes": self.margin_bytes,
            "estimated_bytes": self.estimated_bytes,
            "estimated_terms": list(self.estimated_terms),
            "text": self.text(),
        }


def close_call(rank: RankMemory, needed_bytes: int) -> CloseCall | None:
    """The close call of ``rank`` (one max-length request needs ``needed_bytes`` of KV), or None
    when the margin is larger than every estimated term together (the verdict stands)."""
    if rank.kv_cache_memory_override:
        return None  # --kv-cache-memory: the pool is given, nothing is estimated
    terms = [rank.weights, rank.activation, rank.non_torch]
    if rank.cudagraph_subtracted:
        terms.append(rank.cudagraph)
    estimated = [t for t in terms if t.source == "estimated" and t.num_bytes > 0]
    estimated_bytes = sum(t.num_bytes for t in estimated)
    fits = rank.available_kv_bytes >= needed_bytes
    margin = abs(rank.available_kv_bytes - needed_bytes)
    if not estimated or margin > estimated_bytes:
        return None
    return CloseCall(
        fits=fits,
        margin_bytes=margin,
        estimated_bytes=estimated_bytes,
        estimated_terms=tuple(f"{t.name} {t.num_bytes / GiB:.2f} GiB" for t in estimated),
    )


def plan_close_call(
    engine: EngineName, fits: bool, ranks: tuple[RankMemory, ...], needed_bytes: int
) -> CloseCall | None:
    """A vLLM plan's close call on its tightest stage; None for other engines, and when the
    verdict rests on something else (a length refusal, a warm-up that cannot fit)."""
    if not engine_is(engine, lambda e: e.group_blocks) or not ranks:
        return None
    tightest = min(ranks, key=lambda r: r.available_kv_bytes)
    if (tightest.available_kv_bytes >= needed_bytes) != fits:
        return None
    return close_call(tightest, needed_bytes)
