"""Which replicas may take an arriving request, and the router's view of it (for the driver's
``_route``, :mod:`kvbudget.sim.driver`)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from kvbudget.sim.prefix import BlockHash
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.router import RouteRequest
from kvbudget.sim.stepped import SteppedReplica

__all__ = ["eligible", "route_request"]


def eligible(replicas: Sequence[SteppedReplica[Any]], request_id: str, now_s: float) -> list[int]:
    """Indices of the replicas that may take ``request_id`` at ``now_s``: ready, and past the
    warm-up or within its share (crc32 of the id / 2**32 below the elapsed fraction of the
    warm-up, :class:`kvbudget.sim.drive_types.ScaleOut`). None ready: the one ready first."""
    ready = [
        i
        for i, rep in enumerate(replicas)
        if rep.ready_s <= now_s
        and (
            rep.warmup_s <= 0
            or now_s >= rep.ready_s + rep.warmup_s
            or zlib.crc32(request_id.encode()) / 2**32 < (now_s - rep.ready_s) / rep.warmup_s
        )
    ]
    if not ready:
        ready = [min(range(len(replicas)), key=lambda i: replicas[i].ready_s)]
    return ready


def route_request(
    req: EngineRequest, view: SteppedReplica[Any], needs_hashes: bool
) -> RouteRequest:
    """The router's view of ``req``; its prompt's block hashes (as ``view``'s cache would key
    them) only when the router reads them."""
    hashes: list[BlockHash] = view.prompt_hashes(req) if needs_hashes else []
    return RouteRequest(req.request_id, req.num_prompt_tokens, hashes, req.session_id)
