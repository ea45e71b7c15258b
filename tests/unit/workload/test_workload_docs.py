"""docs/workloads.md and docs/statistics.md stay true to the code: every option is named."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from kvbudget.workload import arrival_specs, lengths
from kvbudget.workload.prefixes import PrefixSpec, SessionSpec, TenantSpec
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.spec import WorkloadSpec
from kvbudget.workload.traces import TraceReplaySpec

DOCS = Path(__file__).resolve().parents[3] / "docs"


def union_members(annotated: object) -> list[type[BaseModel]]:
    union = typing.get_args(annotated)[0]
    return list(typing.get_args(union))


MODELS: list[type[BaseModel]] = [
    WorkloadSpec,
    PrefixSpec,
    TenantSpec,
    SessionSpec,
    TraceReplaySpec,
    *union_members(arrival_specs.ArrivalSpec),
    *union_members(lengths.LengthSpec),
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_option_documented(model: type[BaseModel]) -> None:
    text = (DOCS / "workloads.md").read_text(encoding="utf-8")
    missing = [
        name for name in model.model_fields if f"`{name}" not in text and f"{name}:" not in text
    ]
    assert not missing, f"{model.__name__} fields missing from docs/workloads.md: {missing}"
    kind = model.model_fields.get("kind")
    if kind is not None:
        assert f"`{kind.default}`" in text


def test_planned_request_fields_documented() -> None:
    text = (DOCS / "workloads.md").read_text(encoding="utf-8")
    missing = [f for f in PlannedRequest.__dataclass_fields__ if f"`{f}`" not in text]
    assert not missing


def test_statistics_page_names_every_test() -> None:
    text = (DOCS / "statistics.md").read_text(encoding="utf-8")
    for term in (
        "Mann–Whitney",
        "AUC",
        "Hodges–Lehmann",
        "Holm",
        "Kolmogorov–Smirnov",
        "Minimum detectable AUC",
        "bootstrap",
        "TPOT",
        "ITL",
        "goodput",
    ):
        assert term.lower() in text.lower(), term


def yaml_blocks() -> list[str]:
    text = (DOCS / "workloads.md").read_text(encoding="utf-8")
    return [part.split("```", 1)[0] for part in text.split("```yaml\n")[1:]]


def test_documented_examples_validate_and_generate() -> None:
    import numpy as np
    import yaml

    from kvbudget.workload.spec import generate, workload_from_dict

    (workload_yaml,) = yaml_blocks()
    spec = workload_from_dict(yaml.safe_load(workload_yaml))
    reqs = generate(spec.model_copy(update={"num_requests": 50}), np.random.default_rng(0))
    assert len(reqs) == 50
