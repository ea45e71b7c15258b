"""One simulated request's result: the row a run hands out per request, and its record.

:class:`RequestResult` is built from the engine's request when it finishes
(:meth:`RequestResult.from_sim`), or by :func:`not_run_result` for one that never ran (refused,
or not arrived by the horizon); :meth:`RequestResult.to_record` gives its ``simulated``
:class:`~kvbudget.records.request.RequestRecord`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kvbudget.records.request import RequestRecord
from kvbudget.records.simulated import ended_as, simulated_record
from kvbudget.sim.request import EngineRequest, SimRequest


@dataclass(slots=True, init=False, unsafe_hash=True)
class RequestResult:
    """One simulated request."""

    request_id: Final[str]
    replica: Final[str]
    arrival_s: Final[float]
    first_scheduled_s: Final[float | None]
    first_token_s: Final[float | None]
    finish_s: Final[float | None]
    prompt_tokens: Final[int]
    output_tokens: Final[int]
    cached_tokens_by_tier: Final[dict[str, int]]
    preemptions: Final[int]
    status: Final[str]
    #: "length" when finished; why not, otherwise ("horizon: waiting", "rejected: ...")
    reason: Final[str]
    tenant: Final[str]
    session_id: Final[str | None]
    cell_id: Final[str | None]
    #: every output token's simulated time (only when the cluster records them: ITL)
    token_times_s: Final[tuple[float, ...]]

    def __init__(
        self,
        request_id: str,
        replica: str,
        arrival_s: float,
        first_scheduled_s: float | None,
        first_token_s: float | None,
        finish_s: float | None,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens_by_tier: dict[str, int],
        preemptions: int,
        status: str,
        reason: str,
        tenant: str = "default",
        session_id: str | None = None,
        cell_id: str | None = None,
        token_times_s: tuple[float, ...] = (),
    ) -> None:
        self.request_id = request_id
        self.replica = replica
        self.arrival_s = arrival_s
        self.first_scheduled_s = first_scheduled_s
        self.first_token_s = first_token_s
        self.finish_s = finish_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.cached_tokens_by_tier = cached_tokens_by_tier
        self.preemptions = preemptions
        self.status = status
        self.reason = reason
        self.tenant = tenant
        self.session_id = session_id
        self.cell_id = cell_id
        self.token_times_s = token_times_s

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def cached_tokens(self) -> int:
        return sum(self.cached_tokens_by_tier.values())

    @classmethod
    def from_sim(
        cls,
        req: SimRequest,
        replica: str,
        reason: str | None = None,
        token_times_s: tuple[float, ...] = (),
    ) -> RequestResult:
        spec = req.spec
        status = req.status
        # positional, in field order (a keyword call costs more: one per finished request)
        return cls(
            spec.request_id,
            replica,
            spec.arrival_s,
            req.first_scheduled_s,
            req.first_token_s,
            req.finish_s,
            spec.num_prompt_tokens,
            req.num_output_tokens,
            dict(req.cached_tokens_by_tier),
            req.num_preemptions,
            (
                "finished"
                if status == "finished"
                else "cancelled"
                if req.finish_reason == "cancelled"
                else "unfinished"
            ),
            reason or (req.finish_reason or status),
            spec.tenant,
            spec.session_id,
            spec.cell_id,
            token_times_s,
        )

    def to_record(self) -> RequestRecord:
        # a client's cancel ("cancelled") and the driver's abort ("abort") are both vLLM's abort
        return simulated_record(
            self.request_id,
            ended_as(self.status, self.reason),
            finish_reason=self.reason,
            error=self.reason,
            cell_id=self.cell_id,
            tenant=self.tenant,
            replica=self.replica,
            session_id=self.session_id,
            scheduled_s=self.arrival_s,
            sent_s=self.arrival_s,
            first_token_s=self.first_token_s,
            done_s=self.finish_s,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            cached_tokens_by_tier=self.cached_tokens_by_tier,
            preemptions=self.preemptions,
            queue_s=(
                self.first_scheduled_s - self.arrival_s
                if self.first_scheduled_s is not None
                else None
            ),
            token_times_s=self.token_times_s,
        )


def not_run_result(req: EngineRequest, replica: str, reason: str) -> RequestResult:
    """The result of a request that never ran on ``replica``: refused, or not arrived."""
    return RequestResult(
        request_id=req.request_id,
        replica=replica,
        arrival_s=req.arrival_s,
        first_scheduled_s=None,
        first_token_s=None,
        finish_s=None,
        prompt_tokens=req.num_prompt_tokens,
        output_tokens=0,
        cached_tokens_by_tier={},
        preemptions=0,
        status="unfinished",
        reason=reason,
        tenant=req.tenant,
        session_id=req.session_id,
        cell_id=req.cell_id,
    )
