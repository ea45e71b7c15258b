"""The registry of timing models (kvbudget.sim.timing_select): a model registered in a test is
selectable by name (``build_replica``, the scenario's ``timing_model``) without editing any
other module; ``auto`` still tries only measured, then the roofline.

Independent figures: the fake model's step times are the constants given to it here
(``FixedTiming``: ``step_s + per_token_s * tokens``, 0.5 s + 0 s/token); the built-in names are
the three the CLI has offered since the measured model landed (docs/commands/sim.md).
"""

from __future__ import annotations

import click
import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.errors import ConfigError
from kvbudget.sim import aic, timing_select
from kvbudget.sim.fromplan import build_replica
from kvbudget.sim.scenario import scenario_from_dict
from kvbudget.sim.timing import FixedTiming
from kvbudget.sim.timing_select import (
    BuiltTiming,
    TimingContext,
    register_timing_model,
    timing_model_names,
)

REQUEST = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", max_model_len=8192)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the registry, so the test's registrations end with the test."""
    monkeypatch.setattr(timing_select, "_REGISTRY", dict(timing_select._REGISTRY))


def test_the_builtin_names_are_the_clis_choices() -> None:
    assert timing_model_names() == ("auto", "measured", "roofline")
    from kvbudget.cli.sim import sim

    (option,) = [p for p in sim.params if p.name == "timing_model"]
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == ("auto", "measured", "roofline")


@pytest.mark.usefixtures("registry")
def test_a_registered_model_is_selectable_by_name() -> None:
    seen: list[TimingContext] = []

    def fake(context: TimingContext) -> BuiltTiming:
        seen.append(context)
        return BuiltTiming(FixedTiming(step_s=0.5, name="fake"), "fake (a test's constant)")

    register_timing_model("fake", fake)
    assert "fake" in timing_model_names()
    built = build_replica(REQUEST, timing_model="fake")
    assert built.timing_name == "fake (a test's constant)"
    assert built.timing.prefill_time_s(100) == 0.5
    (context,) = seen
    assert context.plan is built.plan and context.request is REQUEST
    assert context.roofline is not None  # the builder is offered the replica's roofline
    assert "timing fake (a test's constant)" in built.description
    # the scenario takes the registered name too
    assert scenario_from_dict({"timing_model": "fake"}).timing_model == "fake"


@pytest.mark.usefixtures("registry")
def test_a_model_that_does_not_apply_is_refused_with_its_reason() -> None:
    register_timing_model("fake", lambda context: f"tp {context.plan.tp}: not this one")
    with pytest.raises(ConfigError) as info:
        build_replica(REQUEST, timing_model="fake")
    assert str(info.value) == (
        "--timing-model fake: tp 1: not this one; use --timing-model roofline or auto"
    )


@pytest.mark.usefixtures("registry")
def test_auto_does_not_try_a_registered_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(context: TimingContext) -> BuiltTiming:
        raise AssertionError("auto tried a model outside measured, roofline")

    register_timing_model("fake", never)
    monkeypatch.setattr(aic, "installed_version", lambda: None)
    built = build_replica(REQUEST)
    assert built.timing_name.startswith("roofline (auto: aiconfigurator-core is not installed")


@pytest.mark.usefixtures("registry")
def test_a_name_is_registered_once_and_auto_is_reserved() -> None:
    with pytest.raises(ValueError, match="'roofline' is already registered"):
        register_timing_model("roofline", lambda context: "no")
    with pytest.raises(ValueError, match="'auto' is reserved"):
        register_timing_model("auto", lambda context: "no")


def test_an_unknown_scenario_timing_model_names_the_registered_ones() -> None:
    with pytest.raises(ConfigError) as info:
        scenario_from_dict({"timing_model": "vidur"})
    assert str(info.value) == (
        "timing_model: 'vidur' is not a timing model; use one of auto, measured, roofline"
    )
