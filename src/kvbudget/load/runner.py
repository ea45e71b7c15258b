"""One worker of a load run: closed or open loop, every request recorded as it finishes.

Accounting rules (the summary checks them):

* every request that was sent yields exactly one :class:`RequestRecord`, appended to the
  JSONL file the moment it finishes: ``sent = ok + error + cancelled``;
* open loop: ``offered`` counts the requests the schedule offered to this worker; a request
  is sent at its scheduled time, or later when the client is behind (``schedule_lag_s``) or
  ``max_inflight`` requests are already in flight; requests still unsent when the send
  window closes (schedule end + ``timeout_s``) are counted as ``not_sent``, never dropped
  silently;
* closed loop: ``concurrency`` requests in flight; ``duration_s`` stops issuing new ones;
* multi-turn sessions (``cfg.workload.num_turns > 1``): a session's turns go to one worker and
  are sent one after the other; turn ``k`` is sent once turn ``k - 1`` finished (open loop: at
  its planned arrival or then, whichever is later; its ``scheduled_s`` is that time), and its
  prompt is turn ``k - 1``'s prompt, the answer the server gave, then its new user message (chat:
  the same as messages). A turn whose previous turn did not complete is not sent (``not_sent``).
* early stop (``stop_when``, a caller's judge of each finished record): once it names a reason,
  no request is sent any more (the unsent ones are ``not_sent``, with their ids) and the ones
  in flight are aborted and recorded as ``cancelled`` with the reason as their excerpt, so
  ``sent = ok + error + cancelled`` still holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from kvbudget.load.client import Abort, ClientRequest, OpenAIClient
from kvbudget.load.config import RunConfig
from kvbudget.load.request_record import build_record
from kvbudget.load.session_turns import Answer, Sessions, compose
from kvbudget.load.worker_share import closed_source, sessions_of, share_of
from kvbudget.records import JsonlWriter, RequestRecord
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.tokenizer import get_tokenizer

ProgressFn = Callable[[RequestRecord], None]
#: judges each finished (non-warm-up) record; a reason (str) stops the run early
StopWhen = Callable[[RequestRecord], str | None]


@dataclass
class WorkerResult:
    """What one worker did (merged by the caller)."""

    worker: int
    offered: int = 0
    sent: int = 0
    not_sent: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    max_inflight_seen: int = 0
    headers: dict[str, str] | None = None
    not_sent_ids: list[str] = field(default_factory=list)
    #: why ``stop_when`` stopped the run early (None: it ran to the end)
    stopped_early: str | None = None


@dataclass
class _Ctx:
    cfg: RunConfig
    client: OpenAIClient
    writer: JsonlWriter
    t0: float
    worker: int
    segment: int
    progress: ProgressFn | None
    result: WorkerResult
    inflight: int = 0
    sessions: Sessions | None = None
    stop_when: StopWhen | None = None
    abort: Abort | None = None

    @property
    def stopped(self) -> bool:
        return self.abort is not None and self.abort.event.is_set()


async def _run_one(
    ctx: _Ctx,
    planned: PlannedRequest,
    index: int,
    scheduled_s: float | None,
    history: Answer | None = None,
) -> Answer:
    cfg = ctx.cfg
    prompt, messages = compose(history, planned.text())
    if history is not None:
        planned = replace(planned, prompt_text=prompt)  # the record hashes what was sent
    creq = ClientRequest(
        request_id=planned.request_id,
        prompt=prompt,
        messages=messages if history is not None else None,
        max_tokens=planned.output_tokens,
        model=cfg.model,
        endpoint=cfg.endpoint,
        ignore_eos=cfg.ignore_eos,
        cache_salt=planned.cache_salt,
        cancel_after_tokens=planned.cancel_after_tokens,
    )
    ctx.inflight += 1
    ctx.result.max_inflight_seen = max(ctx.result.max_inflight_seen, ctx.inflight)
    ctx.result.sent += 1
    try:
        out = await ctx.client.stream(creq, ctx.abort)
    finally:
        ctx.inflight -= 1
    record = build_record(
        cfg,
        planned,
        out,
        t0=ctx.t0,
        worker=ctx.worker,
        segment=ctx.segment,
        warmup=index < cfg.warmup_requests,
        scheduled_s=scheduled_s,
    )
    if cfg.check_tokens != "none":
        record = await _check_tokens(ctx, record, creq.prompt, out.text)
    ctx.writer.write(record)
    if ctx.progress is not None:
        ctx.progress(record)
    if ctx.stop_when is not None and ctx.abort is not None and not ctx.stopped:
        reason = None if record.warmup else ctx.stop_when(record)
        if reason is not None:
            ctx.result.stopped_early = reason
            ctx.abort.reason = f"stopped early: {reason}"
            ctx.abort.event.set()
    answer = Answer(prompt, messages, out.text, out.status == "ok", time.perf_counter())
    if ctx.sessions is not None and planned.session_id is not None:
        ctx.sessions.done(planned.session_id, planned.turn_index, answer)
    return answer


def _not_sent(ctx: _Ctx, planned: PlannedRequest) -> None:
    """A turn left unsent because the turn before it did not complete."""
    ctx.result.not_sent += 1
    ctx.result.not_sent_ids.append(planned.request_id)
    if ctx.sessions is not None and planned.session_id is not None:
        failed = Answer("", (), "", False, time.perf_counter())
        ctx.sessions.done(planned.session_id, planned.turn_index, failed)


async def _check_tokens(
    ctx: _Ctx, record: RequestRecord, prompt: str, output: str
) -> RequestRecord:
    """Independent token counts (server /tokenize or the local synthetic tokenizer)."""
    chat = ctx.cfg.endpoint == "chat"
    if ctx.cfg.check_tokens == "server":
        p = await ctx.client.tokenize_count(ctx.cfg.model, prompt, chat=chat)
        o: int | None = 0
        if output:
            o = await ctx.client.tokenize_count(ctx.cfg.model, output, add_special_tokens=False)
    else:
        tok = get_tokenizer(ctx.cfg.vocab_size)
        if chat:
            prompt = tok.render_chat([{"role": "user", "content": prompt}])
        p, o = tok.count(prompt), tok.count(output)
    return record.model_copy(update={"prompt_tokens_check": p, "output_tokens_check": o})


async def _closed_loop(
    ctx: _Ctx,
    source: Iterator[tuple[int, PlannedRequest]],
    concurrency: int,
    skip: set[str],
    *,
    finite: bool = True,
) -> None:
    cfg = ctx.cfg
    deadline = None if cfg.duration_s is None else ctx.t0 + cfg.duration_s
    lock = asyncio.Lock()

    async def next_item() -> tuple[int, PlannedRequest] | None:
        async with lock:
            if ctx.stopped:
                return None
            for item in source:
                if item[1].request_id in skip:
                    continue
                ctx.result.offered += 1
                return item
            return None

    async def loop() -> None:
        while (deadline is None or time.perf_counter() < deadline) and not ctx.stopped:
            item = await next_item()
            if item is None:
                return
            await _run_one(ctx, item[1], item[0], None)

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    if ctx.stopped and finite:  # what the early stop left unsent
        rest = [p.request_id for _, p in source if p.request_id not in skip]
        ctx.result.offered += len(rest)
        ctx.result.not_sent += len(rest)
        ctx.result.not_sent_ids.extend(rest)


async def _closed_sessions(
    ctx: _Ctx,
    sessions: list[list[tuple[int, PlannedRequest]]],
    concurrency: int,
) -> None:
    """Closed loop over whole sessions: each of ``concurrency`` loops runs one session's turns
    in order (turn k no earlier than the session's first send + k x turn interval)."""
    cfg = ctx.cfg
    deadline = None if cfg.duration_s is None else ctx.t0 + cfg.duration_s
    interval = cfg.workload.turn_interval_s
    queue = iter(sessions)

    async def loop() -> None:
        for session in queue:
            if ctx.stopped or (deadline is not None and time.perf_counter() >= deadline):
                return
            history: Answer | None = None
            start = time.perf_counter()
            for k, (index, planned) in enumerate(session):
                if deadline is not None and time.perf_counter() >= deadline:
                    return  # --duration: no new turn either
                ctx.result.offered += 1
                if ctx.stopped or (k > 0 and (history is None or not history.ok)):
                    _not_sent(ctx, planned)
                    continue
                wait = start + planned.turn_index * interval - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                history = await _run_one(ctx, planned, index, None, history)

    await asyncio.gather(*(loop() for _ in range(concurrency)))


async def _open_loop(
    ctx: _Ctx,
    items: Sequence[tuple[int, PlannedRequest]],
    *,
    rebase: bool,
) -> None:
    cfg = ctx.cfg
    if not items:
        return
    base = min(p.arrival_s for _, p in items) if rebase else 0.0
    last = max(p.arrival_s for _, p in items) - base
    close_at = ctx.t0 + last + cfg.timeout_s
    sem = asyncio.Semaphore(cfg.max_inflight)
    tasks: set[asyncio.Task[None]] = set()

    async def guarded(planned: PlannedRequest, index: int, scheduled: float) -> None:
        try:
            await _run_one(ctx, planned, index, scheduled)
        finally:
            sem.release()

    async def chained(planned: PlannedRequest, index: int, scheduled: float) -> None:
        assert ctx.sessions is not None and planned.session_id is not None
        history = await ctx.sessions.wait(planned.session_id, planned.turn_index - 1)
        if not history.ok or ctx.stopped:
            _not_sent(ctx, planned)
            return
        ready = max(scheduled, history.done_s - ctx.t0)
        delay = ctx.t0 + ready - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await sem.acquire()
        try:
            await _run_one(ctx, planned, index, ready, history)
        finally:
            sem.release()

    def not_sent(pos: int) -> None:
        rest = [p.request_id for _, p in items[pos:]]
        ctx.result.offered += len(rest) - 1
        ctx.result.not_sent += len(rest)
        ctx.result.not_sent_ids.extend(rest)

    for pos, (index, planned) in enumerate(items):
        ctx.result.offered += 1
        scheduled = planned.arrival_s - base
        if ctx.sessions is not None and planned.turn_index > 0 and planned.session_id:
            # sent once the turn before it finished, by a task of its own
            task = asyncio.create_task(chained(planned, index, scheduled))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            continue
        delay = ctx.t0 + scheduled - time.perf_counter()
        if delay > 0:
            await _sleep_unless_stopped(ctx, delay)
        if ctx.stopped:
            not_sent(pos)
            break
        try:
            await asyncio.wait_for(sem.acquire(), timeout=max(0.0, close_at - time.perf_counter()))
        except TimeoutError:
            not_sent(pos)
            break
        if ctx.stopped:
            sem.release()
            not_sent(pos)
            break
        task = asyncio.create_task(guarded(planned, index, scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


async def _sleep_unless_stopped(ctx: _Ctx, delay_s: float) -> None:
    if ctx.abort is None:
        await asyncio.sleep(delay_s)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ctx.abort.event.wait(), timeout=delay_s)


async def run_worker(
    cfg: RunConfig,
    *,
    writer: JsonlWriter,
    t0: float,
    worker: int = 0,
    num_workers: int = 1,
    segment: int = 0,
    planned: Sequence[PlannedRequest] | None = None,
    skip_ids: set[str] | None = None,
    api_key: str | None = None,
    progress: ProgressFn | None = None,
    stop_when: StopWhen | None = None,
) -> WorkerResult:
    """Run this worker's share of the load; starts sending at ``t0`` (perf_counter clock).

    ``planned`` are the requests (closed loop: in order; open loop: with ``arrival_s``); when
    ``None`` a closed loop generates synthetic requests. ``skip_ids`` are requests already
    recorded (``--resume``); an open-loop resume rebases the remaining schedule to start at 0.
    ``stop_when``: judged on each finished record; a reason stops the run early (see above).
    """
    skip = skip_ids or set()
    result = WorkerResult(worker=worker)
    if cfg.open_loop:
        share = max(1, cfg.max_inflight // num_workers)
    else:
        share = cfg.concurrency // num_workers + (
            1 if worker < cfg.concurrency % num_workers else 0
        )
    pool = max(1, share)
    cpu0 = time.process_time()
    delay = t0 - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    wall0 = time.perf_counter()
    async with OpenAIClient(
        cfg.base_url,
        concurrency=pool,
        timeout_s=cfg.timeout_s,
        connect_timeout_s=cfg.connect_timeout_s,
        api_key=api_key,
    ) as client:
        multi = cfg.workload.multi_turn
        ctx = _Ctx(cfg, client, writer, t0, worker, segment, progress, result)
        if multi:
            ctx.sessions = Sessions()
        if stop_when is not None:
            ctx.stop_when, ctx.abort = stop_when, Abort(asyncio.Event())
        if cfg.open_loop:
            assert planned is not None, "open-loop runs need planned requests"
            mine = [
                (i, p)
                for i, p in share_of(planned, worker, num_workers, by_session=multi)
                if p.request_id not in skip
            ]
            mine.sort(key=lambda ip: (ip[1].arrival_s, ip[1].turn_index))
            await _open_loop(ctx, mine, rebase=bool(skip))
        elif multi and planned is not None and share > 0:
            mine = share_of(planned, worker, num_workers, by_session=True)
            await _closed_sessions(ctx, sessions_of(mine), share)
        elif share > 0:
            source = closed_source(cfg, planned, worker, num_workers)
            finite = planned is not None or cfg.num_requests is not None
            await _closed_loop(ctx, source, share, skip, finite=finite)
        result.headers = client.first_headers
    result.wall_s = time.perf_counter() - wall0
    result.cpu_s = time.process_time() - cpu0
    return result
