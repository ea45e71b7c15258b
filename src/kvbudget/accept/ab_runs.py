"""Run the plan's single-factor comparisons (seed step 6: "重新启动到可比状态").

For each comparison: the variant lock is the baseline lock with the ``set`` overrides; if the
two differ in anything but the declared factor the comparison is ``not_comparable`` and nothing
runs. Otherwise the baseline and the variant each start fresh (a new target: restart to a
comparable state), get the same warm-up, and run the comparison's cells with the same seeds,
so both see identical requests from an identical starting state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbudget.accept.judge.comparisons import judge_comparison, not_comparable
from kvbudget.accept.plan.engine_config import FACTOR_ENGINE_FIELD, engine_differences
from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.plan.lockcheck import (
    Difference,
    apply_overrides,
    difference_lines,
    lock_differences,
    single_factor_check,
)
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.result import ComparisonResult
from kvbudget.accept.run import MatrixOutcome, run_matrix
from kvbudget.accept.targets.base import PreparedTarget, TargetFactory
from kvbudget.errors import KvbudgetError


def _fresh_run(
    plan: AcceptPlan,
    factory: TargetFactory,
    lock: ObjectLock,
    cells: list[str] | None,
    rng: np.random.Generator,
) -> tuple[PreparedTarget, MatrixOutcome]:
    prepared = factory(lock)
    try:
        return prepared, run_matrix(
            plan, prepared.target, out_dir=None, cells_subset=cells, rng=rng
        )
    finally:
        prepared.target.close()


def run_comparisons(
    plan: AcceptPlan, factory: TargetFactory, rng: np.random.Generator
) -> list[ComparisonResult]:
    out: list[ComparisonResult] = []
    for comp in plan.comparisons:
        variant_lock = apply_overrides(plan.lock, comp.set)
        diffs = lock_differences(plan.lock, variant_lock)
        lines = difference_lines(diffs)
        if not diffs:
            out.append(
                not_comparable(
                    comp, [], "the variant's lock does not differ from the baseline's at all"
                )
            )
            continue
        if not single_factor_check(comp.factor, diffs):
            out.append(
                not_comparable(comp, lines, "the locks differ in more than the declared factor")
            )
            continue
        try:
            base, base_out = _fresh_run(plan, factory, plan.lock, comp.cells, rng)
            variant, var_out = _fresh_run(plan, factory, variant_lock, comp.cells, rng)
        except KvbudgetError as exc:
            out.append(
                not_comparable(
                    comp, lines, f"a run could not be started: {exc.one_line()}", verdict="untested"
                )
            )
            continue
        engine_diffs = _engine_changes(base, variant)
        engine_lines = difference_lines(engine_diffs)
        wanted = FACTOR_ENGINE_FIELD[comp.factor]
        if (
            base.engine is not None
            and variant.engine is not None
            and not any(d.field == wanted for d in engine_diffs)
        ):
            out.append(
                not_comparable(
                    comp,
                    lines + engine_lines,
                    f"the variant's engine was started with the same {wanted} as the baseline's; "
                    "the two arms would be the same engine",
                )
            )
            continue
        field_name = diffs[0].field
        baseline_value: Any = (
            getattr(plan.lock, field_name).value if hasattr(plan.lock, field_name) else None
        )
        result = judge_comparison(
            comp,
            baseline_runs=base_out.runs,
            variant_runs=var_out.runs,
            baseline_ledger=base.ledger,
            variant_ledger=variant.ledger,
            differences=lines,
            baseline_value=baseline_value,
            variant_value=comp.set.get(field_name),
            rng=rng,
        )
        note = "baseline and variant each restarted fresh, same warm-up, same requests (seeds)"
        out.append(
            result.model_copy(
                update={"reasons": [*result.reasons, note], "engine_changes": engine_lines}
            )
        )
    return out


def _engine_changes(base: PreparedTarget, variant: PreparedTarget) -> list[Difference]:
    if base.engine is None or variant.engine is None:
        return []
    return engine_differences(base.engine, variant.engine)
