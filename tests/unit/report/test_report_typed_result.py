"""issue 33 step 5: the report renders a typed result.

What a report shows of the plan and the target is read once, in accept
(:mod:`kvbudget.accept.result_views`), into frozen views carried by the result; ``report/``
only renders them. Expected values come from examples/acceptance-demo.yaml as written.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from kvbudget.accept.plan.planfile import load_plan
from kvbudget.accept.result import AcceptResult, Ledger
from kvbudget.records import Provenance
from kvbudget.report.summary import load_words, tier_label

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "acceptance-demo.yaml"
REPORT = REPO / "src" / "kvbudget" / "report"
#: the accept modules report/ may import: the result, its typed views, the one loader
ALLOWED = {"kvbudget.accept.result", "kvbudget.accept.result_views", "kvbudget.accept.result_load"}


def _doc(**update: object) -> AcceptResult:
    plan = load_plan(DEMO)
    doc = AcceptResult(
        provenance=Provenance(kind="simulated", timing_model="roofline"),
        name=plan.name,
        seed=plan.seed,
        plan=plan.model_dump(mode="json"),
        plan_sha256=plan.canonical_sha256(),
        target={"kind": "sim", "source": "simulated", "label": None, "synthetic_text": True},
        lock=[],
        blocking=[],
        ledger=Ledger(),
        cells=[],
        stop_conditions=[],
        verdict="untested",
        verdict_reasons=["x"],
        created="2026-01-01T00:00:00Z",
    )
    return doc.model_copy(update=update)


def test_report_imports_only_the_result_and_reads_no_plan_dicts() -> None:
    for path in sorted(REPORT.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("kvbudget.accept")
        }
        assert imported <= ALLOWED, (path.name, imported - ALLOWED)
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\.(plan|target)\.get\(", text), path.name


def test_plan_view_holds_the_declared_load() -> None:
    declared = yaml.safe_load(DEMO.read_text(encoding="utf-8"))["load"]
    view = _doc().plan_view
    assert list(view.input_tiers) == ["short", "medium", "long"]
    long = view.input_tiers["long"]
    assert (long.min_tokens, long.max_tokens, long.output_tokens) == (8192, 15360, 256)
    assert long.source == "planning_scenario" and long.data_ref is None
    normal = view.concurrency_tier("normal")
    assert (normal.concurrency, normal.arrival, normal.offered_rate_per_s) == (16, "poisson", 4.0)
    assert view.concurrency_tier("peak").offered_rate_per_s is None  # a closed loop offers none
    assert view.repetitions == declared["repetitions"] == 2
    assert view.max_requests_per_cell == 120 and view.template_version == "chat-v1"
    assert [s.prompt_tokens for s in view.samples] == [412, 2875, 12210]
    assert view.ceilings == {"ttft_s": (("p50", 1.0), ("p95", 2.0)), "tpot_s": (("p95", 0.06),)}
    assert view.has_lock and view.grid_input_tiers == ("short", "medium", "long")


def test_sentences_from_the_views() -> None:
    doc = _doc()
    assert tier_label(doc, "medium") == "medium (1024–4096 prompt tokens, 256 out)"
    assert load_words(doc, "normal") == "poisson 4 req/s offered, at most 16 in flight"
    assert load_words(doc, "peak") == "64 concurrent"
    assert load_words(doc, "undeclared") == "? concurrent"  # as a missing tier always read


def test_target_roles_and_lifecycle_are_typed_and_survive_report_json() -> None:
    doc = _doc()
    assert doc.target_view.synthetic_text and doc.target_view.basis == "simulated"
    roles = doc.roles
    assert roles is not None and len(roles.questions) == 4 and len(roles.cache_kinds) == 4
    assert roles.questions[0].who == "the simulated engine (vLLM V1 rules)"  # sim: vLLM rules
    assert len(doc.lifecycle) == 9  # one row per storage layer (accept.lifecycle.LAYER_TITLES)
    again = AcceptResult.model_validate_json(doc.model_dump_json())
    assert again.plan_view == doc.plan_view and again.target_view == doc.target_view
    assert again.roles == roles and again.lifecycle == doc.lifecycle


def test_no_lock_no_roles_and_run_failure_stays_out_of_report_json() -> None:
    doc = _doc(plan={}, run_failure="all 3 requests failed")
    assert doc.roles is None and not doc.plan_view.has_lock
    assert "run_failure" not in doc.model_dump_json()
