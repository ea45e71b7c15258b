"""Which planned requests each worker of a load run sends: every n-th request, or every n-th
session (a session's turns stay on one worker)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kvbudget.load.config import RunConfig
from kvbudget.load.requests import synthetic_request
from kvbudget.load.workloads import session_key
from kvbudget.workload.request import PlannedRequest


def share_of(
    planned: Sequence[PlannedRequest], worker: int, num_workers: int, *, by_session: bool
) -> list[tuple[int, PlannedRequest]]:
    """This worker's (index, request) pairs: every ``num_workers``-th request, or with
    ``by_session`` every ``num_workers``-th session (a session's turns stay on one worker)."""
    if not by_session:
        return [(i, p) for i, p in enumerate(planned) if i % num_workers == worker]
    order: dict[str, int] = {}
    out = []
    for i, p in enumerate(planned):
        number = order.setdefault(session_key(p), len(order))
        if number % num_workers == worker:
            out.append((i, p))
    return out


def closed_source(
    cfg: RunConfig, planned: Sequence[PlannedRequest] | None, worker: int, num_workers: int
) -> Iterator[tuple[int, PlannedRequest]]:
    if planned is not None:
        for i in range(worker, len(planned), num_workers):
            yield i, planned[i]
        return
    i = worker
    while cfg.num_requests is None or i < cfg.num_requests:
        yield i, synthetic_request(cfg, i)
        i += num_workers


def sessions_of(
    items: Sequence[tuple[int, PlannedRequest]],
) -> list[list[tuple[int, PlannedRequest]]]:
    """Items grouped by session, sessions in order of their first item, turns in order."""
    groups: dict[str, list[tuple[int, PlannedRequest]]] = {}
    for item in items:
        groups.setdefault(session_key(item[1]), []).append(item)
    return [sorted(g, key=lambda ip: ip[1].turn_index) for g in groups.values()]
