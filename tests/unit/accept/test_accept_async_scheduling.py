"""``lock.async_scheduling`` (vLLM ``--async-scheduling`` / ``--no-async-scheduling``) on the
accept targets, and in ``kvbudget deploy``'s vLLM command.

The lock of ``examples/acceptance-router.yaml`` pins vLLM 0.11.0, whose
``SchedulerConfig.async_scheduling`` defaults to False (as 0.13.0's ``config/scheduler.py``:
``async_scheduling: bool = False``; the default turned on in 0.14.0). 0.13.0 and 0.14.0
``config/vllm.py`` refuse ``--async-scheduling`` with ``pipeline_parallel_size > 1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.accept.plan.engine_config import engine_config, serve_flags
from kvbudget.accept.plan.lockcheck import apply_overrides
from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.targets.factories import sim_factory
from kvbudget.accept.targets.lock_resolve import resolve_lock
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.deploy.engine_args import engine_command
from kvbudget.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "acceptance-router.yaml"


def _plan() -> AcceptPlan:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return parse_plan(data)


def test_not_in_the_lock_the_sim_target_uses_the_versions_default_and_says_so() -> None:
    plan = _plan()
    prepared = sim_factory(plan)(plan.lock)
    target = prepared.target
    assert isinstance(target, SimTarget)
    assert not target.replicas[0].async_scheduling
    assert "async scheduling off (vLLM 0.11.0's default: off up to 0.13.0;" in target.info.label
    assert "async_scheduling" not in prepared.computed_lock  # no lock field to confirm


def test_the_lock_value_reaches_the_simulated_scheduler_and_is_confirmed() -> None:
    plan = _plan()
    lock = apply_overrides(plan.lock, {"async_scheduling": True})
    prepared = sim_factory(plan)(lock)
    target = prepared.target
    assert isinstance(target, SimTarget)
    assert all(r.async_scheduling for r in target.replicas)
    assert "async scheduling on (--async-scheduling given (vLLM 0.11.0))" in target.info.label
    assert prepared.engine is not None and prepared.engine.async_scheduling is True
    entries, _ = resolve_lock(lock, target.info, computed=prepared.computed_lock)
    (entry,) = [e for e in entries if e.field == "async_scheduling"]
    assert (entry.value, entry.status) == (True, "confirmed")
    assert "--async-scheduling given" in (entry.source or "")


def test_refused_where_vllm_refuses_it() -> None:
    plan = _plan()
    lock = apply_overrides(
        plan.lock,
        {"async_scheduling": True, "pipeline_parallel": 2, "engine": {"version": "0.14.0"}},
    )
    with pytest.raises(ConfigError, match=r"vLLM 0\.14\.0 refuses --async-scheduling with --pp 2"):
        sim_factory(plan)(lock)


def test_serve_target_and_deploy_pass_vllms_flag() -> None:
    plan = _plan()
    on = apply_overrides(plan.lock, {"async_scheduling": True})
    off = apply_overrides(plan.lock, {"async_scheduling": False})
    assert "--async-scheduling" in serve_flags(engine_config(plan.target, on))
    assert "--no-async-scheduling" in serve_flags(engine_config(plan.target, off))
    flags = serve_flags(engine_config(plan.target, plan.lock))
    assert not {"--async-scheduling", "--no-async-scheduling"} & set(flags)
    assert "--no-async-scheduling" in engine_command(off).argv
    assert not {"--async-scheduling", "--no-async-scheduling"} & set(engine_command(plan.lock).argv)
    sglang = apply_overrides(on, {"engine": {"name": "sglang", "version": "0.5.4"}})
    with pytest.raises(ConfigError, match=r"lock\.async_scheduling: vLLM's --async-scheduling"):
        engine_command(sglang)
