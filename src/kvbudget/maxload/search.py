"""The search: bracket the highest load that meets the SLO, then bisect.

Assumes the SLO's figures worsen as load rises (the highest passing load and the lowest failing
one bound the answer). For a rate: from a starting estimate, multiply by ``factor`` until a load
fails (or divide until one passes), then bisect until the bracket ``[lo, hi]`` is within
``tolerance`` of ``hi`` (``hi - lo <= tolerance * hi``); the answer is ``lo``, a load that was
run and met the SLO. For a concurrency the same on integers, until ``hi - lo == 1``.

A short run cannot tell a rate slightly above the service rate from one slightly below it (the
queue's drift, ``(rate / service - 1) * n`` requests, hides in its noise, about ``sqrt(n)``).
So the rate's answer is *confirmed* by a longer run (``confirm``: the same probe with more
requests); if the longer run's queue grows, or the SLO fails there, the search goes on with the
longer runs from that rate down (bracketing by ``1 + 2 * tolerance``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kvbudget.maxload.point import LoadKind, Point, binding_constraint
from kvbudget.maxload.probe import BudgetSpent

Probe = Callable[[LoadKind, float, int], Point]

#: at most this many multiplications (or divisions) by ``factor`` while bracketing
MAX_BRACKET_STEPS = 12


@dataclass(slots=True)
class Search:
    """One search (one seed): every probed point, the final bracket, the answer."""

    kind: LoadKind
    seed: int
    points: list[Point] = field(default_factory=list)
    #: the highest load that met the SLO (None: even the lowest probed load failed)
    passing: Point | None = None
    #: the lowest load above it that failed (None: none failed up to the cap)
    failing: Point | None = None
    #: why the search stopped before its tolerance (a spent budget), else None
    stopped: str | None = None
    #: the answer held in the longer confirmation run (False: not confirmed or not asked)
    confirmed: bool = False

    @property
    def answer(self) -> float | None:
        return None if self.passing is None else self.passing.load

    @property
    def binding_constraint(self) -> str | None:
        return None if self.failing is None else binding_constraint(self.passing, self.failing)


def _integer(kind: LoadKind, x: float) -> float:
    return float(max(1, round(x))) if kind == "concurrency" else x


def search(
    probe: Probe,
    kind: LoadKind,
    *,
    start: float,
    seed: int,
    factor: float = 2.0,
    tolerance: float = 0.05,
    ceiling: float | None = None,
    confirm: Probe | None = None,
) -> Search:
    """The highest ``kind`` load meeting the SLO, bracketed from ``start`` then bisected.

    ``ceiling``: never probe above it (concurrency: the number of requests, beyond which a
    closed loop is the same burst); a search that passes there stops with ``failing=None``.
    ``confirm``: a longer-running probe that must also pass at the answer (see above).
    """
    out = Search(kind, seed)
    try:
        _search(out, probe, start=start, factor=factor, tolerance=tolerance, ceiling=ceiling)
        if confirm is None or out.passing is None:
            return out
        point = confirm(kind, out.passing.load, seed)
        out.points.append(point)
        if point.meets_slo:
            out.passing, out.confirmed = point, True
            return out
        start = out.passing.load / (1 + 2 * tolerance)
        out.passing, out.failing = None, point
        _search(
            out,
            confirm,
            start=start,
            factor=1 + 2 * tolerance,
            tolerance=tolerance,
            ceiling=point.load,
            known={point.load: point},
        )
        out.confirmed = out.passing is not None
    except BudgetSpent as exc:
        out.stopped = str(exc)
    return out


def _search(
    out: Search,
    probe: Probe,
    *,
    start: float,
    factor: float,
    tolerance: float,
    ceiling: float | None,
    known: dict[float, Point] | None = None,
) -> None:
    """Bracket and bisect, recording into ``out`` as it goes (a spent budget keeps it)."""
    kind, seed = out.kind, out.seed

    def run(load: float) -> Point:
        if known is not None and load in known:  # already run (the failed confirmation)
            return known[load]
        point = probe(kind, load, seed)
        out.points.append(point)
        return point

    load = _integer(kind, start if ceiling is None else min(start, ceiling))
    point = run(load)
    if point.meets_slo:
        out.passing = point
        for _ in range(MAX_BRACKET_STEPS):
            nxt = _integer(kind, max(load * factor, load + 1 if kind == "concurrency" else 0))
            if ceiling is not None:
                nxt = min(nxt, ceiling)
            if nxt <= load:
                return  # at the ceiling and passing
            load, point = nxt, run(nxt)
            if not point.meets_slo:
                out.failing = point
                break
            out.passing = point
        else:
            return
    else:
        out.failing = point
        for _ in range(MAX_BRACKET_STEPS):
            nxt = _integer(kind, load / factor)
            if nxt >= load:
                return  # concurrency 1 fails: nothing meets the SLO
            load, point = nxt, run(nxt)
            if point.meets_slo:
                out.passing = point
                break
            out.failing = point
        else:
            return
    assert out.passing is not None and out.failing is not None
    while not _narrow_enough(kind, out.passing.load, out.failing.load, tolerance):
        mid = (out.passing.load + out.failing.load) / 2
        mid = float(math.floor(mid)) if kind == "concurrency" else mid
        point = run(mid)
        if point.meets_slo:
            out.passing = point
        else:
            out.failing = point


def _narrow_enough(kind: LoadKind, lo: float, hi: float, tolerance: float) -> bool:
    if kind == "concurrency":
        return hi - lo <= 1
    return hi - lo <= tolerance * hi
