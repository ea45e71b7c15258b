"""An SLO written the way users write it: ``ttft_p95<1s,tpot_p95<50ms,goodput>=0.99``.

Terms, separated by commas:

- ``<metric>_<statistic> < <value><unit>``: a ceiling on one statistic of one latency metric
  over the run's requests. Metrics: ``ttft``, ``tpot``, ``itl`` (every gap between two output
  tokens), ``e2e`` (``e2el``, vLLM's name, is accepted). Statistics: ``pNN`` (``p50``, ``p95``,
  ``p99.9``: ``numpy.percentile``, linear, as ``vllm bench serve`` computes them), ``mean``,
  ``median``. Units: ``s`` or ``ms`` (required).
- ``<metric> < <value><unit>`` (no statistic): a per-request threshold, only counted by goodput.
- ``goodput >= <fraction>`` (``0.99`` or ``99%``): the fraction of requests that meet every
  per-request threshold, as ``vllm bench serve --goodput`` defines it. The thresholds are the
  SLO's TTFT, TPOT and E2E values (with or without a statistic); ITL is not a per-request
  quantity and is not one of them (vLLM's goodput keys are ttft, tpot and e2el). Errors and
  cancelled requests count against it (:mod:`kvbudget.metrics.slo`).

``<`` and ``<=`` both mean "at or under" (a measured latency is never exactly the limit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvbudget.errors import ConfigError
from kvbudget.metrics.slo import SloSpec

METRICS: dict[str, str] = {
    "ttft": "ttft",
    "tpot": "tpot",
    "itl": "itl",
    "e2e": "e2e",
    "e2el": "e2e",
}
#: metrics vLLM's goodput checks per request (``--goodput ttft:.. tpot:.. e2el:..``)
PER_REQUEST = ("ttft", "tpot", "e2e")
_EXAMPLE = "write e.g. 'ttft_p95<1s,tpot_p95<50ms' or 'ttft<1s,goodput>=0.99'"
_TERM = re.compile(
    r"^(?P<name>[a-z0-9_.]+)\s*(?P<op><=|>=|<|>|=)\s*(?P<value>[0-9]*\.?[0-9]+(?:e-?[0-9]+)?)"
    r"\s*(?P<unit>[a-z%]*)$"
)
_STAT = re.compile(r"^(?:p(?P<q>[0-9]+(?:\.[0-9]+)?)|mean|median)$")


@dataclass(frozen=True, slots=True)
class LatencyTerm:
    """``metric`` (ttft, tpot, itl, e2e) ``statistic`` (p95, mean, median or None) <= ceiling."""

    metric: str
    statistic: str | None
    ceiling_s: float

    @property
    def name(self) -> str:
        return self.metric if self.statistic is None else f"{self.metric}_{self.statistic}"

    @property
    def key(self) -> str:
        """The term's key in a point's ``values`` (``ttft_p95_s``)."""
        return f"{self.name}_s"

    def text(self) -> str:
        ms = self.ceiling_s * 1e3
        return f"{self.name}<{ms:g}ms" if ms < 1000 else f"{self.name}<{self.ceiling_s:g}s"


@dataclass(frozen=True, slots=True)
class Slo:
    """A parsed SLO: latency ceilings on statistics, per-request thresholds and goodput."""

    text: str
    terms: tuple[LatencyTerm, ...]
    goodput_min: float | None = None

    @property
    def statistic_terms(self) -> tuple[LatencyTerm, ...]:
        return tuple(t for t in self.terms if t.statistic is not None)

    def per_request(self) -> SloSpec:
        """The per-request thresholds goodput counts (the strictest value per metric)."""
        limits: dict[str, float] = {}
        for t in self.terms:
            if t.metric in PER_REQUEST:
                limits[t.metric] = min(limits.get(t.metric, t.ceiling_s), t.ceiling_s)
        return SloSpec(
            ttft_s_max=limits.get("ttft"),
            tpot_s_max=limits.get("tpot"),
            e2e_s_max=limits.get("e2e"),
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "text": self.text,
            "terms": [
                {"metric": t.metric, "statistic": t.statistic, "ceiling_s": t.ceiling_s}
                for t in self.terms
            ],
            "goodput_min": self.goodput_min,
        }


def _refuse(text: str, term: str, why: str) -> ConfigError:
    return ConfigError(f"--slo {text!r}: {term!r} {why}; {_EXAMPLE}", field="slo")


def _latency(text: str, term: str, name: str, op: str, value: float, unit: str) -> LatencyTerm:
    metric, _, statistic = name.partition("_")
    if metric not in METRICS:
        raise _refuse(text, term, "names no metric; use one of ttft, tpot, itl, e2e")
    if statistic and not _STAT.match(statistic):
        raise _refuse(text, term, f"has statistic {statistic!r}; use pNN (p95), mean or median")
    q = _STAT.match(statistic)
    if q is not None and q.group("q") is not None and not 0 < float(q.group("q")) <= 100:
        raise _refuse(text, term, "has a percentile outside (0, 100]")
    if op not in ("<", "<="):
        raise _refuse(text, term, "is not a ceiling; latencies take '<' (e.g. ttft_p95<1s)")
    if unit not in ("s", "ms"):
        got = f"unit {unit!r}" if unit else "no unit"
        raise _refuse(text, term, f"has {got}; give s or ms (1s, 50ms)")
    ceiling_s = value / 1e3 if unit == "ms" else value
    if ceiling_s <= 0:
        raise _refuse(text, term, "has a ceiling of 0; give a positive time")
    stat = statistic or None
    if metric == "itl" and stat is None:
        raise _refuse(text, term, "is per token, not per request; give a statistic (itl_p95<50ms)")
    return LatencyTerm(METRICS[metric], stat, ceiling_s)


def _goodput(text: str, term: str, op: str, value: float, unit: str) -> float:
    if op not in (">=", ">"):
        raise _refuse(text, term, "is not a floor; goodput takes '>=' (goodput>=0.99)")
    if unit == "%":
        value /= 100
    elif unit:
        raise _refuse(
            text, term, f"has unit {unit!r}; give a fraction (0.99) or a percentage (99%)"
        )
    if not 0 < value <= 1:
        raise _refuse(text, term, "is not a fraction in (0, 1]")
    return value


def parse_slo(text: str) -> Slo:
    """Parse ``text``; a malformed term is one :class:`ConfigError` naming it and the fix."""
    terms: list[LatencyTerm] = []
    goodput_min: float | None = None
    parts = [p.strip() for p in text.lower().split(",")]
    if not any(parts):
        raise ConfigError(f"--slo {text!r}: no term; {_EXAMPLE}", field="slo")
    for part in parts:
        if not part:
            raise _refuse(text, part, "is empty (two commas in a row?)")
        m = _TERM.match(part)
        if m is None:
            raise _refuse(text, part, "is not '<metric>_<statistic><<value><unit>'")
        name, op, unit = m.group("name"), m.group("op"), m.group("unit")
        value = float(m.group("value"))
        if name == "goodput":
            if goodput_min is not None:
                raise _refuse(text, part, "repeats goodput; give it once")
            goodput_min = _goodput(text, part, op, value, unit)
        else:
            terms.append(_latency(text, part, name, op, value, unit))
    names = [t.name for t in terms]
    for name in names:
        if names.count(name) > 1:
            raise _refuse(text, name, "is given twice; keep one ceiling per statistic")
    bare = [t for t in terms if t.statistic is None]
    if bare and goodput_min is None:
        raise _refuse(
            text,
            bare[0].name,
            "has no statistic and no goodput term counts requests under it; give one "
            f"({bare[0].name}_p95...) or add goodput>=0.99",
        )
    if goodput_min is not None and not any(t.metric in PER_REQUEST for t in terms):
        raise _refuse(text, "goodput", "has no per-request threshold to count (ttft, tpot, e2e)")
    return Slo(text, tuple(terms), goodput_min)
