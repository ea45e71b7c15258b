"""llama.cpp-style engine behaviour: fixed slots instead of paged blocks.

``llama-server -np N -c C`` (non-unified KV, the default when ``-np`` is given) owns ``N`` slots
of ``n_ctx_slot = C / N`` (padded to 256) KV cells each. What this module reproduces, following
``tools/server/server-context.cpp`` (``get_available_slot``, ``update_slots``):

* **Slot choice.** A new request takes an idle slot: the one whose cached tokens share the longest
  common prefix with the prompt when ``lcp / prompt_len`` exceeds ``similarity_threshold``
  (``--slot-prompt-similarity``, 0.1), otherwise the least recently used idle slot.
* **Prompt reuse.** The slot keeps its last prompt and output; the common prefix is not
  recomputed, but at least one prompt token is always evaluated (a full hit recomputes 1 token).
* **Deferral.** When all slots are busy a request waits (``requests_deferred``), first come first
  served; nothing is preempted and nothing is swapped.
* **Batches.** Each server iteration adds one token per generating slot, then prompt tokens of the
  slots still processing their prompt, in slot order, until ``n_batch`` tokens; the batch runs in
  ubatches of ``n_ubatch`` tokens, each priced by the step-time model as one step.
* **Context.** A prompt of ``n_ctx_slot`` tokens or more is refused (llama.cpp answers 400);
  generation stops at the slot's context (``finish_reason = length``, no context shift).

The driver steps it (:class:`kvbudget.sim.slots_replica.SlotReplica`, :func:`~kvbudget.sim.slots_replica.run_slots`).

Not modelled: the RAM prompt cache of idle slots (``--cache-ram``), context shift, speculative
decoding, ``--cache-reuse`` chunk reuse, the unified KV pool (``-kvu``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from kvbudget.errors import ConfigError
from kvbudget.sim.timing import BatchShape, StepTimeModel


@dataclass(frozen=True, slots=True)
class SlotConfig:
    """The llama.cpp server knobs that shape scheduling (``-np``, ``-c``, ``-b``, ``-ub``)."""

    num_slots: int
    n_ctx_slot: int
    n_batch: int = 2048
    n_ubatch: int = 512
    cache_prompt: bool = True
    similarity_threshold: float = 0.1

    def __post_init__(self) -> None:
        for name in ("num_slots", "n_ctx_slot", "n_batch", "n_ubatch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}", field=name)


@dataclass(frozen=True, slots=True)
class SlotRequest:
    request_id: str
    arrival_s: float
    prompt_token_ids: Sequence[int]
    output_tokens: int


@dataclass(slots=True)
class SlotRequestResult:
    """What happened to one request (simulated)."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    status: Literal["ok", "error"] = "ok"
    error: str | None = None
    slot: int = -1
    start_s: float | None = None
    first_token_s: float | None = None
    done_s: float | None = None
    cached_tokens: int = 0
    token_times_s: list[float] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        return len(self.token_times_s)


@dataclass(slots=True)
class _Slot:
    index: int
    cache: list[int] = field(default_factory=list)
    last_used_s: float = -1.0
    req: SlotRequest | None = None
    result: SlotRequestResult | None = None
    n_past: int = 0  # tokens in the KV cells of this slot for the current request
    prompt_done: int = 0  # prompt tokens evaluated (incl. reused ones)
    max_out: int = 0


def _lcp(a: list[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(slots=True)
class SlotStats:
    num_deferred_peak: int = 0
    peak_cells_in_use: int = 0
    total_cells: int = 0
    num_steps: int = 0
    num_ubatches: int = 0

    @property
    def peak_kv_usage(self) -> float:
        return self.peak_cells_in_use / self.total_cells if self.total_cells else 0.0


class SlotEngine:
    """A llama.cpp-style server over fixed slots, priced by a step-time model."""

    def __init__(self, config: SlotConfig, timing: StepTimeModel) -> None:
        self.config = config
        self.timing = timing
        self.slots = [_Slot(index=i) for i in range(config.num_slots)]
        self.waiting: deque[SlotRequest] = deque()
        self.stats = SlotStats(total_cells=config.num_slots * config.n_ctx_slot)
        self._gen_id = -1  # generated tokens get unique negative ids (never match a prompt)

    def add_request(self, req: SlotRequest) -> None:
        self.waiting.append(req)
        self.stats.num_deferred_peak = max(self.stats.num_deferred_peak, self._num_deferred())

    def _num_deferred(self) -> int:
        free = sum(1 for s in self.slots if s.req is None)
        return max(0, len(self.waiting) - free)

    def has_work(self) -> bool:
        return bool(self.waiting) or any(s.req is not None for s in self.slots)

    def _pick_slot(self, prompt: Sequence[int]) -> _Slot | None:
        idle = [s for s in self.slots if s.req is None]
        if not idle:
            return None
        if self.config.cache_prompt and prompt:
            best = max(idle, key=lambda s: (_lcp(s.cache, prompt), -s.index))
            lcp = _lcp(best.cache, prompt)
            if lcp / len(prompt) > self.config.similarity_threshold:
                return best
        return min(idle, key=lambda s: (s.last_used_s, s.index))

    def _assign(self, now_s: float, rejected: list[SlotRequestResult]) -> None:
        while self.waiting:
            req = self.waiting[0]
            n_prompt = len(req.prompt_token_ids)
            if n_prompt >= self.config.n_ctx_slot or n_prompt == 0:
                self.waiting.popleft()
                rejected.append(
                    SlotRequestResult(
                        request_id=req.request_id,
                        arrival_s=req.arrival_s,
                        prompt_tokens=n_prompt,
                        status="error",
                        error=f"prompt of {n_prompt} tokens does not fit a slot of "
                        f"{self.config.n_ctx_slot} cells",
                        done_s=now_s,
                    )
                )
                continue
            slot = self._pick_slot(req.prompt_token_ids)
            if slot is None:
                return
            self.waiting.popleft()
            reuse = _lcp(slot.cache, req.prompt_token_ids) if self.config.cache_prompt else 0
            reuse = min(reuse, n_prompt - 1)  # at least one prompt token is evaluated
            slot.req = req
            slot.result = SlotRequestResult(
                request_id=req.request_id,
                arrival_s=req.arrival_s,
                prompt_tokens=n_prompt,
                slot=slot.index,
                start_s=now_s,
                cached_tokens=reuse,
            )
            slot.cache = list(req.prompt_token_ids[:reuse])
            slot.n_past = reuse
            slot.prompt_done = reuse
            slot.max_out = min(req.output_tokens, self.config.n_ctx_slot - n_prompt)

    def step(self, now_s: float) -> tuple[float, list[SlotRequestResult]]:
        """One server iteration starting at ``now_s``: (duration, requests finished or refused)."""
        done: list[SlotRequestResult] = []
        self._assign(now_s, done)
        # (slot, kind, tokens, context before) in batch order: decode tokens first
        parts: list[tuple[_Slot, bool, int, int]] = []
        budget = self.config.n_batch
        for s in self.slots:
            if s.req is not None and s.prompt_done >= len(s.req.prompt_token_ids):
                parts.append((s, False, 1, s.n_past))
                budget -= 1
        for s in self.slots:
            if budget <= 0:
                break
            if s.req is not None and s.prompt_done < len(s.req.prompt_token_ids):
                n = min(len(s.req.prompt_token_ids) - s.prompt_done, budget)
                parts.append((s, True, n, s.n_past))
                budget -= n
        if not parts:
            return 0.0, done
        duration = self._price(parts)
        end_s = now_s + duration
        self.stats.num_steps += 1
        released = 0  # cells of requests that end in this step (in use during it)
        for s, is_prompt, n, _ in parts:
            req, res = s.req, s.result
            assert req is not None and res is not None
            if is_prompt:
                s.cache.extend(req.prompt_token_ids[s.prompt_done : s.prompt_done + n])
                s.prompt_done += n
                s.n_past += n
                if s.prompt_done < len(req.prompt_token_ids):
                    continue
                res.first_token_s = end_s
            else:
                s.cache.append(self._gen_id)
                self._gen_id -= 1
                s.n_past += 1
            res.token_times_s.append(end_s)
            if res.output_tokens >= s.max_out:
                res.done_s = end_s
                done.append(res)
                released += s.n_past
                s.req, s.result, s.last_used_s = None, None, end_s
        cells = released + sum(s.n_past for s in self.slots if s.req is not None)
        self.stats.peak_cells_in_use = max(self.stats.peak_cells_in_use, cells)
        return duration, done

    def _price(self, parts: list[tuple[_Slot, bool, int, int]]) -> float:
        """Split the batch into ubatches of n_ubatch tokens; each ubatch is one priced step."""
        ub = self.config.n_ubatch
        total = 0.0
        filled = 0
        shape = _ShapeAcc()
        for _, is_prompt, n, ctx in parts:
            offset = 0
            while offset < n:
                take = min(n - offset, ub - filled)
                if is_prompt:
                    c = ctx + offset
                    shape.prefill_tokens += take
                    shape.pairs += take * (c + (take + 1) / 2)
                    shape.prefill_ctx += c + take
                else:
                    shape.decode_seqs += take
                    shape.decode_ctx += ctx
                offset += take
                filled += take
                if filled == ub:
                    total += self.timing.step_time_s(shape.freeze())
                    self.stats.num_ubatches += 1
                    shape, filled = _ShapeAcc(), 0
        if filled:
            total += self.timing.step_time_s(shape.freeze())
            self.stats.num_ubatches += 1
        return total


@dataclass(slots=True)
class _ShapeAcc:
    prefill_tokens: int = 0
    pairs: float = 0.0
    prefill_ctx: int = 0
    decode_seqs: int = 0
    decode_ctx: int = 0

    def freeze(self) -> BatchShape:
        return BatchShape(
            num_prefill_tokens=self.prefill_tokens,
            prefill_pairs=self.pairs,
            prefill_context_tokens=self.prefill_ctx,
            num_decode_seqs=self.decode_seqs,
            decode_context_tokens=self.decode_ctx,
        )
