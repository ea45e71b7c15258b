"""docs/plan-file.md and its JSON Schema export stay true to the code."""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.accept.plan.planfile import plan_json_schema

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_exported_schema_matches_code() -> None:
    exported = json.loads((DOCS / "plan-file.schema.json").read_text(encoding="utf-8"))
    assert exported == plan_json_schema(), (
        "regenerate: kvbudget accept --schema > docs/plan-file.schema.json"
    )


def test_plan_doc_embeds_the_demo_example() -> None:
    doc = (DOCS / "plan-file.md").read_text(encoding="utf-8")
    demo = (DOCS.parent / "examples" / "acceptance-demo.yaml").read_text(encoding="utf-8")
    assert demo in doc
    for top in plan_json_schema()["properties"]:
        assert f"`{top}`" in doc, top
