"""Plan-file validation: one-line errors naming the field, the value and the fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kvbudget.accept.plan.lock import flatten_lock
from kvbudget.accept.plan.planfile import load_plan, parse_plan, plan_json_schema
from kvbudget.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "acceptance-demo.yaml"


def demo_data() -> dict[str, Any]:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_plan(data)
    text = info.value.one_line()
    assert "\n" not in text
    assert text.startswith("ConfigError: ")
    return text.removeprefix("ConfigError: ")


def test_demo_plan_loads() -> None:
    plan = load_plan(DEMO)
    assert plan.lock.model.id == "meta-llama/Llama-3.1-8B"
    assert plan.load.cell_order()[0] == ("short", "single")
    assert len(plan.load.cell_order()) == 9


def test_schema_export_accepts_demo_with_an_independent_validator() -> None:
    schema = plan_json_schema()
    jsonschema.validate(demo_data(), schema)
    bad = demo_data()
    bad["lock"]["model"]["revison"] = "x"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_tier_range_error_names_field_values_and_fix() -> None:
    data = demo_data()
    data["load"]["tiers"]["short"] = {"min_tokens": 200, "max_tokens": 100, "output_tokens": 8}
    assert error_of(data) == (
        "load.tiers.short.max_tokens: must be >= min_tokens (got 100 < 200); fix the tier range"
    )


@pytest.mark.parametrize(
    ("mutate", "field", "fragment"),
    [
        (
            lambda d: d["lock"]["model"].__setitem__("revison", "abc"),
            "lock.model.revison",
            "unknown field",
        ),
        (lambda d: d.pop("stop"), "stop", "required field is missing"),
        (
            lambda d: d["load"]["concurrency"]["normal"].__setitem__("arrival", "sometimes"),
            "load.concurrency.normal.arrival",
            "'sometimes'",
        ),
        (
            lambda d: d["load"]["concurrency"]["normal"].pop("rate_per_s"),
            "load.concurrency.normal.rate_per_s",
            "needs rate_per_s",
        ),
        (
            lambda d: d["load"]["concurrency"]["peak"].__setitem__("concurrency", 0),
            "load.concurrency.peak.concurrency",
            "got 0",
        ),
        (lambda d: d.__setitem__("stop", {"error_rate_max": 0.01}), "stop.ttft_s", "ceiling"),
        (
            lambda d: d["comparisons"][0].__setitem__("set", {"block_size": 32}),
            "comparisons.0.set",
            "factor 'kv_dtype' must be set",
        ),
        (
            lambda d: d["load"]["tiers"]["long"].__setitem__("source", "real_data"),
            "load.tiers.long.data_ref",
            "planning_scenario",
        ),
        (
            lambda d: d["quality"].append({"id": "r", "kind": "regex", "pattern": "(unclosed"}),
            "quality.0.pattern",
            "not a valid regular expression",
        ),
        (
            lambda d: d["quality"].append({"id": "n", "kind": "needle", "expected": "X"}),
            "quality.0.distance_tokens",
            "needs distance_tokens",
        ),
        (lambda d: d["load"]["tiers"].clear(), "load.tiers", "no input tier"),
        (
            lambda d: (
                d["load"]["tiers"].pop("long"),
                d["load"].__setitem__("order", ["long/peak"]),
            ),
            "load.order",
            "input tier 'long' is not declared",
        ),
        (
            lambda d: d["load"].__setitem__("order", ["short/single", "huge/peak"]),
            "load.order",
            "'huge/peak'",
        ),
        (
            lambda d: d["lock"].__setitem__("gpu_memory_utilization", 1.5),
            "lock.gpu_memory_utilization",
            "(0, 1]",
        ),
        (
            lambda d: d["lock"].__setitem__("max_model_len", {"status": "confirmed"}),
            "lock.max_model_len.status",
            "needs a value",
        ),
        (
            lambda d: d["comparisons"][0].__setitem__("cells", ["medium/normal", "tiny/peak"]),
            "comparisons.0.cells",
            "'tiny/peak'",
        ),
        (
            lambda d: d.__setitem__("target", {"kind": "http"}),
            "target.base_url",
            "needs base_url",
        ),
    ],
)
def test_validation_errors_are_one_line_and_name_the_field(
    mutate: Any, field: str, fragment: str
) -> None:
    data = copy.deepcopy(demo_data())
    mutate(data)
    text = error_of(data)
    assert text.startswith(f"{field}: "), text
    assert fragment in text, text


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nload: [1, 2\nstop: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_plan(bad)
    assert "line" in str(info.value)
    assert "\n" not in info.value.one_line()


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_plan(tmp_path / "nope.yaml")


def test_bare_lock_value_is_requested_and_null_is_unconfirmed() -> None:
    plan = load_plan(DEMO)
    flat = flatten_lock(plan.lock)
    assert flat["kv_dtype"].status == "requested"
    assert flat["gpu.driver"].status == "unconfirmed"
    assert flat["model.revision"].value is None


@pytest.mark.parametrize(
    ("declared", "expected_tiers"),
    [
        (["short"], ["short"]),
        (["long", "short"], ["short", "long"]),  # run short -> long, whatever the file's order
        (["short", "medium", "long"], ["short", "medium", "long"]),
    ],
)
def test_one_two_or_three_input_tiers(declared: list[str], expected_tiers: list[str]) -> None:
    data = demo_data()
    data["load"]["tiers"] = {name: data["load"]["tiers"][name] for name in declared}
    data["comparisons"] = []
    plan = parse_plan(data)
    assert plan.load.input_tiers == tuple(expected_tiers)
    # each declared tier x single -> normal -> peak; undeclared tiers have no cell
    assert plan.load.cell_order() == [
        (t, c) for t in expected_tiers for c in ("single", "normal", "peak")
    ]
