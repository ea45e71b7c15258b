"""Quality judges on known outputs; lock resolution and single-factor comparability."""

from __future__ import annotations

from pathlib import Path

from kvbudget.accept.judge.quality import evaluate_checkpoint, judge_output
from kvbudget.accept.plan.checks import QualityCheckpoint
from kvbudget.accept.plan.lockcheck import (
    apply_overrides,
    lock_differences,
    single_factor_check,
)
from kvbudget.accept.plan.planfile import load_plan
from kvbudget.accept.targets.base import TargetInfo
from kvbudget.accept.targets.lock_resolve import resolve_lock

DEMO = Path(__file__).resolve().parents[3] / "examples" / "acceptance-demo.yaml"


def cp(**kw: object) -> QualityCheckpoint:
    return QualityCheckpoint.model_validate({"id": "q", **kw})


def test_judges() -> None:
    assert judge_output(cp(kind="exact", expected="Paris"), "Paris.\nBecause...")[0]
    assert not judge_output(cp(kind="exact", expected="Paris"), "Lyon")[0]
    assert judge_output(cp(kind="regex", pattern=r"\d{4}-\d{2}"), "on 2026-09")[0]
    schema = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}
    assert judge_output(cp(kind="json_schema", json_schema=schema), '```json\n{"total": 3.5}\n```')[
        0
    ]
    ok, why = judge_output(cp(kind="json_schema", json_schema=schema), '{"total": "3.5"}')
    assert not ok and "not of type 'number'" in why
    needle = cp(kind="needle", expected="CACHE_OK", distance_tokens=5000)
    assert judge_output(needle, "the code is CACHE_OK")[0]
    assert not judge_output(needle, "the code is CACHE_0K")[0]
    tool = cp(kind="tool_call", tool_name="get_weather", tool_arguments={"city": "Paris"})
    assert judge_output(tool, '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}')[
        0
    ]
    assert not judge_output(tool, '{"name": "get_weather", "arguments": {"city": "Lyon"}}')[0]
    refuse = cp(kind="refusal", should_refuse=True)
    assert judge_output(refuse, "I'm sorry, I can't help with that.")[0]
    assert not judge_output(refuse, "Sure, here is how.")[0]


def test_simulated_outputs_are_untested_never_pass() -> None:
    out = evaluate_checkpoint(cp(kind="exact", expected="Paris"), ["Paris"], simulated=True)
    assert out.verdict == "untested" and "synthetic" in out.reason
    assert (
        evaluate_checkpoint(cp(kind="exact", expected="x"), [None], simulated=False).verdict
        == "untested"
    )
    fail = evaluate_checkpoint(
        cp(kind="exact", expected="Paris"), ["Paris", "Rome"], simulated=False
    )
    assert (fail.verdict, fail.num_checked, fail.num_failed) == ("fail", 2, 1)


def test_lock_resolution_confirms_observed_and_flags_mismatch() -> None:
    plan = load_plan(DEMO)
    info = TargetInfo(
        kind="http",
        source="measured",
        label="x",
        engine="vllm",
        observed={"engine.version": ("0.11.0", "/version"), "kv_dtype": ("fp8", "startup log")},
        not_applicable={"engine.container": "bare metal"},
    )
    entries, blocking = resolve_lock(plan.lock, info)
    by = {e.field: e for e in entries}
    assert by["engine.version"].status == "confirmed" and by["engine.version"].source == "/version"
    assert by["kv_dtype"].status == "mismatch"
    assert any(
        b.startswith("kv_dtype: plan says 'auto' but startup log reports 'fp8'") for b in blocking
    )
    assert by["engine.container"].status == "not_applicable"
    assert not any(b.startswith("engine.container") for b in blocking)
    assert any(b.startswith("gpu.driver") for b in blocking)


def test_single_factor_and_not_comparable() -> None:
    plan = load_plan(DEMO)
    one = apply_overrides(plan.lock, {"kv_dtype": "fp8"})
    diffs = lock_differences(plan.lock, one)
    assert single_factor_check("kv_dtype", diffs)
    assert [(d.field, d.baseline, d.variant) for d in diffs] == [("kv_dtype", "auto", "fp8")]
    assert [d.line() for d in diffs] == ["kv_dtype: 'auto' -> 'fp8'"]
    two = apply_overrides(plan.lock, {"kv_dtype": "fp8", "block_size": 32})
    diffs = lock_differences(plan.lock, two)
    assert not single_factor_check("kv_dtype", diffs)
    assert "block_size: 16 -> 32" in [d.line() for d in diffs]
    assert not single_factor_check("kv_dtype", lock_differences(plan.lock, plan.lock))
