"""What a run's own request records say beyond its cells, judged by ``run_acceptance``.

* :func:`unstable_queues`: an ``unstable_queue`` anomaly per open-loop cell repetition whose
  TTFT kept growing with arrival time (:func:`kvbudget.metrics.stability.queue_growth`);
* :func:`run_failure`: one line when every timed request of the run failed
  (:func:`kvbudget.load.diagnosis.failure_diagnosis`).

Both read the timed records the matrix ran (a resumed run's earlier repetitions included), the
same records ``OUT/records.jsonl`` holds; warm-up requests count toward neither.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.request_keys import RequestKey
from kvbudget.accept.result import Anomaly
from kvbudget.load.diagnosis import failure_diagnosis
from kvbudget.metrics.stability import queue_growth
from kvbudget.records import RequestRecord

UNSTABLE_QUEUE_ADVICE = (
    "the cell's latency percentiles grow with its duration: read them as overload, not as the "
    "deployment's latency; lower the tier's rate_per_s or add replicas, and judge capacity at a "
    "stable rate"
)


def unstable_queues(records: Iterable[RequestRecord]) -> list[Anomaly]:
    """An ``unstable_queue`` anomaly per open-loop cell repetition whose TTFT kept growing,
    in repetition-id order."""
    runs: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.warmup or r.scheduled_s is None or r.ttft_s is None:
            continue  # closed-loop cells have no schedule: their queue cannot run away
        runs.setdefault(RequestKey.decode(r.request_id).run_id, []).append(r)
    out = []
    for run_id, recs in sorted(runs.items()):
        growth = queue_growth([r.scheduled_s or 0.0 for r in recs], [r.ttft_s or 0.0 for r in recs])
        if growth is not None:
            out.append(
                Anomaly(
                    code="unstable_queue",
                    title=f"Unstable queue in {run_id}",
                    evidence=growth.line(),
                    advice=UNSTABLE_QUEUE_ADVICE,
                    cells=[recs[0].cell_id or run_id],
                )
            )
    return out


def run_failure(plan: AcceptPlan, records: Iterable[RequestRecord]) -> str | None:
    """One line when every timed request of the run failed, naming where they were sent."""
    target = plan.target
    if target.kind == "http":
        url = f"{str(target.base_url).rstrip('/')} (target.base_url)"
    elif target.kind == "serve":
        url = "kvbudget serve (target.kind serve)"
    else:
        url = "the simulator (target.kind sim)"
    return failure_diagnosis(records, url=url)
