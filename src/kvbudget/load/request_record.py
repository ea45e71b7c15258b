"""A streamed request's outcome as a :class:`~kvbudget.records.RequestRecord` on the run's
timeline (seconds since the workers' shared ``t0``)."""

from __future__ import annotations

from kvbudget.load.client import StreamOutcome
from kvbudget.load.config import RunConfig
from kvbudget.records import RequestRecord, at_one_instant, derive_latencies, sha256_text
from kvbudget.workload.request import PlannedRequest


def build_record(
    cfg: RunConfig,
    planned: PlannedRequest,
    out: StreamOutcome,
    *,
    t0: float,
    worker: int,
    segment: int,
    warmup: bool,
    scheduled_s: float | None,
) -> RequestRecord:
    """A :class:`RequestRecord` on the run timeline (seconds since ``t0``)."""

    def rel(t: float | None) -> float | None:
        return None if t is None else t - t0

    sent = rel(out.sent_s)
    first = rel(out.first_token_s)
    done = rel(out.done_s)
    n_out = out.output_tokens()
    ttft, tpot, e2e = derive_latencies(
        sent_s=sent, first_token_s=first, done_s=done, output_tokens=n_out
    )
    token_times = [t - t0 for t in out.token_times_s()]
    if at_one_instant(token_times):
        tpot = None  # not observable
    prompt = planned.text()
    return RequestRecord(
        request_id=planned.request_id,
        source=cfg.record_source,
        status=out.status,
        cell_id=planned.cell_id,
        tenant=planned.tenant,
        session_id=planned.session_id,
        worker=worker,
        run_segment=segment,
        warmup=warmup,
        error_kind=out.error_kind,
        http_status=out.http_status,
        error_excerpt=out.error_excerpt,
        finish_reason=out.finish_reason,
        scheduled_s=scheduled_s,
        sent_s=sent,
        first_token_s=first,
        done_s=done,
        token_times_s=token_times,
        chunk_times_s=[t - t0 for t in out.chunk_times_s],
        schedule_lag_s=None if scheduled_s is None or sent is None else sent - scheduled_s,
        prompt_tokens=out.usage_prompt_tokens,
        output_tokens=n_out,
        cached_tokens=out.cached_tokens,
        token_count_source="usage" if out.usage_completion_tokens is not None else "stream",
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        prompt_sha256=sha256_text(prompt),
        output_sha256=sha256_text(out.text) if out.text else None,
        prompt_text=prompt if cfg.keep_prompts else None,
        output_text=out.text if cfg.keep_prompts else None,
    )
