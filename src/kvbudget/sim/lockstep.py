"""Data-parallel engines of a MoE model stepping in lockstep (vLLM's ``DPEngineCoreProc``).

vLLM 0.32.0 runs each data-parallel rank of a MoE model as a ``DPEngineCoreProc``
(``v1/engine/core.py`` line 1473: ``if data_parallel and vllm_config.model_config.is_moe``; a
dense model's ranks are plain independent engines, "treat like DP=1"), because the MoE layers'
expert all-to-all needs every rank in every forward pass. Its ``run_busy_loop`` (line 2328):

- each loop iteration an engine runs its own step (``_process_engine_step``) or, when it ran
  nothing while the DP wave is still running (another rank has work, or the wave has not been
  found finished yet), ``execute_dummy_batch()`` (lines 2354-2363): one request of one token,
  ``uniform_decode`` (``v1/worker/gpu_worker.py`` line 1431), attending over ``max_query_len``
  = 1 token (``v1/worker/gpu_model_runner.py`` ``_dummy_run``);
- ``_has_global_unfinished_reqs`` (line 2410) all-reduces "has unfinished requests" at the
  wave's first step and every ``dp_sync_interval`` steps (``config/parallel.py`` line 162:
  default 16); between those it answers True, so a wave whose work is done still runs dummy
  steps up to the next sync, then pauses (step counter reset to 0).

Since the forward pass of every rank meets in each MoE layer, one loop iteration lasts as long
as the slowest rank's forward. :class:`LockstepGroup` models that: one
:class:`~kvbudget.sim.stepped.SteppedReplica` wrapping the ``dp`` member replicas (each its own
KV pool and scheduler, built as before). A group step steps every member that has work, prices
every member that ran nothing with the dummy batch, lasts the maximum of those durations (each
from the member's own timing model) and stamps every member's tokens at its end
(:meth:`kvbudget.sim.replica.Replica.retime_last_step`). The wave and its sync interval are
modelled as above. A request reaching the group goes to the member the group's router chooses
(vLLM's DP load balancer: ``least_outstanding``, :mod:`kvbudget.sim.scenario`).

Not modelled: the all-reduce's own cost, padding each rank's token count to the group's
maximum (the step price of a member is its own batch's), and a router reading the clock
(a stale prefix index is refreshed by the time of the group's last step start). With async
scheduling the driver holds a request that reaches a busy group, and the group routes it when
it is released (the members' counts then include the requests routed before it); independent
engines route at arrival, before the requests held for them are counted.
"""

from __future__ import annotations

from collections.abc import Hashable

from kvbudget.errors import ConfigError
from kvbudget.sim.engine import TokenOutput
from kvbudget.sim.prefix import BlockHash
from kvbudget.sim.replica import KVSample, Replica
from kvbudget.sim.request import EngineRequest, SimRequest
from kvbudget.sim.roofline import BatchShape
from kvbudget.sim.router import Router, RouteRequest
from kvbudget.sim.stepped import SteppedReplica

__all__ = ["DP_SYNC_INTERVAL", "DUMMY_BATCH", "LockstepGroup"]

#: vLLM 0.32.0 ``ParallelConfig.dp_sync_interval`` default (``config/parallel.py`` line 162)
DP_SYNC_INTERVAL = 16

#: ``execute_dummy_batch``: one uniform-decode request of one token over a 1-token context
DUMMY_BATCH = BatchShape(0, 0.0, 0, 1, 1)


class LockstepGroup(SteppedReplica[SimRequest]):
    """``dp`` member replicas of one MoE deployment that step together (see the module)."""

    def __init__(
        self,
        name: str,
        members: list[Replica],
        router: Router,
        *,
        sync_interval: int = DP_SYNC_INTERVAL,
    ) -> None:
        if len(members) < 2:
            raise ConfigError("lockstep: a group needs at least two engines", field="members")
        if sync_interval < 1:
            raise ConfigError("lockstep: sync_interval must be >= 1", field="sync_interval")
        first = members[0]
        super().__init__(name, first.timing, ready_s=max(m.ready_s for m in members))
        self.members = members
        self.router = router
        self.sync_interval = sync_interval
        self.async_scheduling = first.async_scheduling
        #: the DP wave runs (vLLM ``engines_running``) and its steps so far (``step_counter``)
        self.wave_running = False
        self.wave_steps = 0
        #: group steps, and member steps that were dummy batches (a member that ran nothing)
        self.num_group_steps = 0
        self.num_dummy_steps = 0
        #: request id -> the member that holds it (until it is handed out)
        self.owner: dict[str, Replica] = {}
        #: the member the last :meth:`add` chose (a refusal is reported under its name)
        self.last_member: Replica = first
        self._finished: list[SimRequest] = []
        self._now_s = 0.0
        #: each member's dummy batch, priced by its own timing model
        self.dummy_s = [m.timing.step_time_s(DUMMY_BATCH) for m in members]

    # ------------------------------------------------------------------ the step protocol
    def add(self, req: EngineRequest) -> object:
        """Route ``req`` to a member (the group's router); its refusal propagates."""
        self.num_routed += 1
        members = self.members
        route = RouteRequest(
            req.request_id,
            req.num_prompt_tokens,
            list(members[0].prompt_hashes(req)) if self.router.needs_hashes else [],
            req.session_id,
        )
        member = members[self.router.choose(route, members, self._now_s)]
        self.last_member = member
        added = member.add(req)
        self.owner[req.request_id] = member
        return added

    def has_work(self) -> bool:
        if self.wave_running:
            return True
        return any(m.has_work() for m in self.members)

    def step(self, now_s: float) -> float:
        """One lockstep iteration at ``now_s``; its duration is the slowest member's."""
        self._now_s = now_s
        members = self.members
        if not self.wave_running:
            if not any(m.has_work() for m in members):
                self.last_num_scheduled_tokens = 0
                self.last_outputs = []
                return 0.0
            self.wave_running = True  # START_DP_WAVE: every engine joins
            self.wave_steps = 0
        dummy_s = self.dummy_s
        ran: list[tuple[Replica, float]] = []
        group_s = 0.0
        num_tokens = 0
        for i, m in enumerate(members):
            stepped = m.has_work()
            duration = m.step(now_s) if stepped else 0.0
            if stepped and (duration > 0 or m.last_num_scheduled_tokens > 0):
                ran.append((m, duration))
                num_tokens += max(1, m.last_num_scheduled_tokens)
            else:
                duration = dummy_s[i]
                self.num_dummy_steps += 1
            if duration > group_s:
                group_s = duration
        end_s = now_s + group_s
        outputs: list[TokenOutput] = []
        for m, duration in ran:
            if duration < group_s and duration > 0:
                m.retime_last_step(now_s + duration, end_s)
            outputs.extend(m.last_outputs)
            done = m.finished()
            if done:
                self._finished.extend(done)
                done.clear()
        self.last_outputs = outputs
        self.last_num_scheduled_tokens = num_tokens
        self.num_group_steps += 1
        self.wave_steps += 1
        sync = self.wave_steps == 1 or self.wave_steps % self.sync_interval == 0
        # _has_global_unfinished_reqs: the all-reduce after this step ends the wave when no
        # engine has unfinished requests
        if sync and not any(m.has_work() for m in members):
            self.wave_running = False
            self.wave_steps = 0
        return group_s

    def finished(self) -> list[SimRequest]:
        return self._finished

    def member_of(self, req: SimRequest) -> Replica:
        """The member that ran ``req`` (handed out: forgotten)."""
        return self.owner.pop(req.request_id, self.last_member)

    def wake_s(self) -> float | None:
        return None  # a waiting rank runs dummy batches with the wave: never stalled

    def sample(self, now_s: float) -> None:
        for m in self.members:
            m.sample(now_s)

    def snapshots(self, now_s: float) -> list[KVSample]:
        return [m.snapshot(now_s) for m in self.members]

    # ------------------------------------------------------------------ router views
    def prompt_hashes(self, req: EngineRequest) -> list[BlockHash]:
        return self.members[0].prompt_hashes(req)

    def num_outstanding(self) -> int:
        return sum(m.num_outstanding() for m in self.members)

    def kv_usage(self) -> float:
        return sum(m.kv_usage() for m in self.members) / len(self.members)

    def queued_prefill_tokens(self) -> int:
        return sum(m.queued_prefill_tokens() for m in self.members)

    def cached_prefix_tokens(self, block_hashes: list[Hashable]) -> tuple[int, int]:
        return max(m.cached_prefix_tokens(block_hashes) for m in self.members)

    def cached_keys(self) -> set[Hashable]:
        keys: set[Hashable] = set()
        for m in self.members:
            keys.update(m.cached_keys())
        return keys

    @property
    def block_size(self) -> int:
        return self.members[0].block_size
