"""Scale-in, session migration and pod crashes in the simulated cluster (all *simulated*).

The second seed: "when scaling in, first stop assigning new requests, wait for the streams in
flight to end or reach an explicit exit deadline, then release the instance. A shared cache may
keep reusable prefixes, but that does not mean active decodes migrate seamlessly. After a pod
crash, the application usually has to recompute from the context it saved; agents with tool
calls must handle retries and idempotency in the application."

Events (handled by :class:`~kvbudget.sim.driver.Driver`):

* :class:`ScaleIn` at ``at_s``: the replica stops receiving requests (the router skips it); the
  requests it holds keep running. At ``at_s + grace_s`` whatever is still there is handled by
  ``on_deadline``:

  - ``"cancel_retry"``: the stream is cancelled (reported ``cancelled``) and the client retries
    the *original* request on another replica: its prompt and the output tokens produced so
    far are computed again (``duplicated_*`` counters);
  - ``"reprefill"``: the session migrates by re-prefill: the application re-sends the prompt
    plus the output streamed so far as a new prompt, with the remaining output tokens; the
    context is computed again on the target but no output token is generated twice;
  - ``"transfer"``: the session migrates by KV transfer: the same continuation arrives at the
    target after ``tokens x kv_bytes_per_token / transfer_bandwidth_bytes_per_s`` with its KV
    present except the last token (the P/D rule, :mod:`kvbudget.sim.disagg`).

* :class:`Crash` at ``at_s``: every request on the replica is lost with its KV (nothing is
  reported for the lost attempt but the counters); the application re-sends each from its
  saved context (prompt + output streamed so far, the remaining output tokens) at once; the
  pod comes back as a new, cold replica ``restart_s`` later.

Retried and migrated requests carry the original id with a ``#retry<n>`` / ``#migrate<n>`` /
``#recover<n>`` suffix and the original arrival time is kept in their latency (the client's
view: the whole wait counts). Replicas involved must run the explicit engine (the cluster builds
them without the lazy-decode fast path when such events are declared).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from kvbudget.errors import ConfigError
from kvbudget.sim.request import EngineRequest, SimRequest

if TYPE_CHECKING:
    from kvbudget.sim.replica import Replica

OnDeadline = Literal["cancel_retry", "reprefill", "transfer"]


@dataclass(frozen=True, slots=True)
class ScaleIn:
    """Stop routing to replica ``replica`` at ``at_s``; act on what is left at the deadline."""

    at_s: float
    replica: int
    grace_s: float = 30.0
    on_deadline: OnDeadline = "cancel_retry"
    transfer_bandwidth_bytes_per_s: float = 25e9

    def __post_init__(self) -> None:
        if self.at_s < 0 or self.grace_s < 0 or self.replica < 0:
            raise ConfigError("scale_in: at_s, grace_s and replica must be >= 0", field="scale_in")
        if self.transfer_bandwidth_bytes_per_s <= 0:
            raise ConfigError(
                "scale_in: transfer_bandwidth_bytes_per_s must be > 0", field="scale_in"
            )


@dataclass(frozen=True, slots=True)
class Crash:
    """Replica ``replica`` dies at ``at_s``; a cold replacement serves from ``at_s + restart_s``."""

    at_s: float
    replica: int
    restart_s: float = 120.0

    def __post_init__(self) -> None:
        if self.at_s < 0 or self.restart_s < 0 or self.replica < 0:
            raise ConfigError("crash: at_s, restart_s and replica must be >= 0", field="crash")


@dataclass(slots=True)
class LifecycleStats:
    """What scale-in, migration and crashes cost, in requests and tokens."""

    num_cancelled: int = 0
    num_retried: int = 0
    num_migrated_reprefill: int = 0
    num_migrated_transfer: int = 0
    num_lost_in_crash: int = 0
    #: context tokens computed again on another replica: a retry's prompt, a re-prefilled or
    #: recovered session's prompt + streamed output
    duplicated_prefill_tokens: int = 0
    #: output tokens generated twice: a cancelled attempt's outputs (the one still in flight
    #: at the deadline included), which its retry generates again
    duplicated_output_tokens: int = 0
    transfer_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    #: each re-sent request's id -> (the id its first re-send was made from, tag, attempt):
    #: the next attempt's id comes from here, never parsed back out of the id's text
    resent: dict[str, tuple[str, str, int]] = field(default_factory=dict)

    def resend_id(self, request_id: str, tag: str) -> str:
        """The id of the next ``tag`` attempt of ``request_id``: ``a#retry1``, then
        ``a#retry2`` (a re-sent request re-sent again the same way), ``a#retry1#migrate1``."""
        base, last_tag, attempt = self.resent.get(request_id, (request_id, tag, 0))
        if last_tag != tag:
            base, attempt = request_id, 0
        new_id = f"{base}#{tag}{attempt + 1}"
        self.resent[new_id] = (base, tag, attempt + 1)
        return new_id

    def as_dict(self) -> dict[str, int | list[str]]:
        return {
            "cancelled": self.num_cancelled,
            "retried": self.num_retried,
            "migrated_reprefill": self.num_migrated_reprefill,
            "migrated_transfer": self.num_migrated_transfer,
            "lost_in_crash": self.num_lost_in_crash,
            "duplicated_prefill_tokens": self.duplicated_prefill_tokens,
            "duplicated_output_tokens": self.duplicated_output_tokens,
            "transfer_bytes": self.transfer_bytes,
            "notes": list(self.notes),
        }


def streamed_outputs(req: SimRequest, now_s: float, step_end_s: float) -> int:
    """Output tokens the client has received by ``now_s``.

    The engine applies a step when it starts; a token of the step still running at ``now_s``
    (it ends at ``step_end_s``) has not reached the client and is wasted work.
    """
    n = req.num_output_tokens
    if n > 0 and req.status == "running" and now_s < step_end_s:
        return n - 1
    return n


def continuation(
    req: SimRequest, tag: str, num_streamed: int, stats: LifecycleStats
) -> EngineRequest:
    """The context so far (prompt + ``num_streamed`` outputs) as a new request for the rest."""
    spec = req.spec
    prompt = tuple(req.token_slice(0, req.num_prompt_tokens + num_streamed))
    return replace(
        spec,
        request_id=stats.resend_id(spec.request_id, tag),
        prompt_token_ids=prompt,
        max_output_tokens=max(1, spec.max_output_tokens - num_streamed),
        cancel_after_tokens=(
            None
            if spec.cancel_after_tokens is None
            else max(1, spec.cancel_after_tokens - num_streamed)
        ),
        kv_transferred=False,
    )


def retry(req: SimRequest, stats: LifecycleStats) -> EngineRequest:
    """The client's retry of the original request (everything recomputed)."""
    new_id = stats.resend_id(req.spec.request_id, "retry")
    return replace(req.spec, request_id=new_id, kv_transferred=False)


def evict(rep: Replica, now_s: float) -> list[tuple[SimRequest, int]]:
    """Every request still on ``rep`` (running first) with the outputs its client has
    received by ``now_s``, removed with its blocks freed."""
    held = list(rep.core.scheduler.running) + list(rep.core.requests.values())
    seen: set[int] = set()
    out: list[SimRequest] = []
    for req in held:
        if id(req) in seen or req.request_id not in rep.core.requests:
            continue
        seen.add(id(req))
        out.append(req)
    streamed = [streamed_outputs(req, now_s, rep.step_end_s) for req in out]
    for req in out:
        rep.core.abort_request(req.request_id)
    rep.core.finished = [r for r in rep.core.finished if r.status != "aborted"]
    return list(zip(out, streamed, strict=True))


def at_deadline(
    rep: Replica, event: ScaleIn, now_s: float, stats: LifecycleStats
) -> tuple[list[SimRequest], list[tuple[float, EngineRequest]]]:
    """Scale-in grace over: cancel and retry, or migrate what is left on ``rep``.

    Returns the cancelled requests (to report, as the client received them) and the
    requests to re-send, with the time each arrives, in order.
    """
    cancelled: list[SimRequest] = []
    resend: list[tuple[float, EngineRequest]] = []
    for req, streamed in evict(rep, now_s):
        if event.on_deadline == "cancel_retry":
            stats.num_cancelled += 1
            stats.num_retried += 1
            stats.duplicated_prefill_tokens += req.num_prompt_tokens
            stats.duplicated_output_tokens += req.num_output_tokens
            req.num_output_tokens = streamed  # the record shows what the client received
            req.finish_reason = "cancelled"
            req.finish_s = now_s
            cancelled.append(req)
            resend.append((now_s, retry(req, stats)))
            continue
        moved = continuation(req, "migrate", streamed, stats)
        if event.on_deadline == "reprefill":
            stats.num_migrated_reprefill += 1
            stats.duplicated_prefill_tokens += moved.num_prompt_tokens
            resend.append((now_s, moved))
        else:
            moved = replace(moved, kv_transferred=True)
            # every context token's KV but the last, which the target recomputes
            num_bytes = (moved.num_prompt_tokens - 1) * rep.config.kv_bytes_per_token
            stats.num_migrated_transfer += 1
            stats.transfer_bytes += num_bytes
            resend.append((now_s + num_bytes / event.transfer_bandwidth_bytes_per_s, moved))
    return cancelled, resend


def after_crash(rep: Replica, now_s: float, stats: LifecycleStats) -> list[EngineRequest]:
    """The pod dies with its KV: the contexts the application re-sends at once, in order."""
    resend: list[EngineRequest] = []
    for req, streamed in evict(rep, now_s):
        moved = continuation(req, "recover", streamed, stats)
        stats.num_lost_in_crash += 1
        stats.duplicated_prefill_tokens += moved.num_prompt_tokens
        resend.append(moved)
    return resend
