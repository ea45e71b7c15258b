"""The measured model corrected by a calibrate profile (kvbudget.sim.measured_correction).

Independent figures: a fake estimator with linear answers (milliseconds) stands for
aiconfigurator-core; each price below is worked by hand from ``MeasuredTiming.price`` (a
prefill-only step of ``n`` new after ``c`` cached: the shared part of
``mixed_step_breakdown(n, 0, n + c, 1, 0)`` plus the context attention of
``mixed_step_breakdown(n + c, 0, n + c, 1, c)``; a decode step of ``m`` at context ``s``:
``decode_step_latency(m, s - 1, 1)``). The synthetic engine run's true times are 1.5 x those
prices for prompts and 0.8 x for decode steps, so the factors must come out 1.5 and 0.8.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.sim.measured import MeasuredTiming
from kvbudget.sim.measured_correction import CorrectedTiming, corrected, derive_correction
from kvbudget.sim.roofline import BatchShape
from kvbudget.sim.timing import CalibrationProfile, MeasuredCorrection, decode_shape, prefill_shape


class LinearEngine:
    """shared = 0.01 ms a token, context attention 0.001 ms a token attended; decode step
    0.5 + 0.05 m + 0.0001 isl ms."""

    def mixed_step_breakdown(
        self, ctx_tokens: int, gen_tokens: int, isl: int, osl: int, prefix: int = 0
    ) -> tuple[float, float, float, float]:
        shared = 0.01 * (ctx_tokens + gen_tokens)
        return (0.0, shared, 0.001 * ctx_tokens, 0.0)

    def decode_step_latency(self, gen_tokens: int, isl: int, osl: int) -> float:
        return 0.5 + 0.05 * gen_tokens + 0.0001 * isl


LABEL = "measured (aiconfigurator-core 0.12.0, h100_sxm, vllm 0.24.0 tables)"

# by hand, seconds (every figure a bucket's own value: powers of two)
# 512 cold, one step: shared 5.12 ms + attention 0.512 ms
P512 = (5.12 + 0.512) / 1e3
# 4,096 cold in steps of 2,048: (2,048 after 0) 20.48 + 2.048; (2,048 after 2,048) 20.48 + 4.096
P4096 = (20.48 + 2.048 + 20.48 + 4.096) / 1e3
# 1,024 cold, one step: 10.24 + 1.024
P1024 = (10.24 + 1.024) / 1e3
# decode: (batch, context per sequence) -> 0.5 + 0.05 m + 0.0001 (s - 1) ms
D1 = (0.5 + 0.05 * 1 + 0.0001 * 511) / 1e3  # 1 at 512
D4 = (0.5 + 0.05 * 4 + 0.0001 * 1023) / 1e3  # 4 at 1,024
D8 = (0.5 + 0.05 * 8 + 0.0001 * 2047) / 1e3  # 8 at 2,048


def _profile(prefill_factor: float, decode_factor: float, **kw: object) -> CalibrationProfile:
    fields: dict[str, object] = dict(
        name="h100-run",
        model_id="Qwen/Qwen3-32B",
        gpu="H100-SXM",
        engine="vllm 0.12.0",
        hardware="H100-SXM",
        engine_settings={"max_num_batched_tokens": 2048},
        prefill_points=[
            (512, prefill_factor * P512),
            (1024, prefill_factor * P1024),
            (4096, prefill_factor * P4096),
        ],
        decode_points=[
            (1, 512, decode_factor * D1),
            (4, 4 * 1024, decode_factor * D4),
            (8, 8 * 2048, decode_factor * D8),
        ],
    )
    fields.update(kw)
    return CalibrationProfile(**fields)  # type: ignore[arg-type]


def _measured() -> MeasuredTiming:
    return MeasuredTiming(LinearEngine(), name=LABEL)


def test_the_hand_prices() -> None:
    timing = _measured()
    assert timing.prefill_time_s(512) == pytest.approx(P512)
    assert timing.prefill_time_s(2048) + timing.prefill_time_s(2048, 2048) == pytest.approx(P4096)
    assert timing.decode_time_s(4, 4 * 1024) == pytest.approx(D4)


def test_factors_of_a_run_at_a_known_multiple() -> None:
    correction = derive_correction(_measured(), _profile(1.5, 0.8), measured_model=LABEL)
    assert correction.prefill_factor == pytest.approx(1.5)
    assert correction.decode_factor == pytest.approx(0.8)
    assert correction.prefill_rms_rel_after == pytest.approx(0.0, abs=1e-12)
    # before: every prompt priced 1/1.5 of its time: relative error 1/1.5 - 1 = -1/3
    assert correction.prefill_rms_rel_before == pytest.approx(1 / 3)
    assert correction.decode_rms_rel_before == pytest.approx(0.25)  # 1/0.8 - 1
    assert (correction.num_prefill_points, correction.num_decode_points) == (3, 3)
    assert correction.prefill_step_tokens == 2048
    assert (correction.profile, correction.engine, correction.hardware) == (
        "h100-run",
        "vllm 0.12.0",
        "H100-SXM",
    )


def test_the_factor_minimises_the_relative_error() -> None:
    """Prompts at 1.2, 1.5 and 2.0 x the price: r = 1/1.2, 1/1.5, 1/2 and
    f = sum r / sum r^2 = (0.8333 + 0.6667 + 0.5) / (0.6944 + 0.4444 + 0.25) = 2 / 1.3889 = 1.44."""
    profile = _profile(1.0, 1.0)
    profile.prefill_points = [(512, 1.2 * P512), (1024, 1.5 * P1024), (4096, 2.0 * P4096)]
    correction = derive_correction(_measured(), profile, measured_model=LABEL)
    r = (1 / 1.2, 1 / 1.5, 1 / 2.0)
    assert correction.prefill_factor == pytest.approx(sum(r) / sum(x * x for x in r))
    assert correction.prefill_factor == pytest.approx(1.44)


def test_corrected_steps_and_label() -> None:
    timing, notes = corrected(_measured(), _profile(1.5, 0.8))
    assert notes == [
        "profile h100-run: it carries no stored correction (kvbudget calibrate --gpu); factors "
        "derived from its points: prefill x1.5, decode x0.8"
    ]
    assert timing.name == f"{LABEL} corrected by h100-run"
    assert timing.step_time_s(prefill_shape(512)) == pytest.approx(1.5 * P512)
    assert timing.step_time_s(decode_shape(4, 4 * 1024)) == pytest.approx(0.8 * D4)
    # a mixed step (prompt tokens and decodes) takes the prefill factor
    mixed = BatchShape(
        num_prefill_tokens=512,
        prefill_pairs=512 * 513 / 2,
        prefill_context_tokens=512,
        num_decode_seqs=4,
        decode_context_tokens=4 * 1024,
    )
    assert timing.step_time_s(mixed) == pytest.approx(1.5 * _measured().step_time_s(mixed))
    assert timing.step_time_s(BatchShape()) == 0.0


def test_a_stored_correction_is_used_when_it_names_this_model() -> None:
    stored = derive_correction(_measured(), _profile(1.5, 0.8), measured_model=LABEL)
    stored = stored.model_copy(update={"decode_factor": 0.5})  # not what the points say
    timing, notes = corrected(_measured(), _profile(1.5, 0.8, measured_correction=stored))
    assert notes == [] and timing.decode_factor == 0.5
    other = stored.model_copy(update={"measured_model": "measured (other)"})
    timing, notes = corrected(_measured(), _profile(1.5, 0.8, measured_correction=other))
    assert timing.decode_factor == pytest.approx(0.8)
    assert "is for measured (other), not this model" in notes[0]


def test_unit_factors_price_byte_identically() -> None:
    """The uncorrected path is the measured model itself; factors of exactly 1 change nothing."""
    one = MeasuredCorrection(
        measured_model=LABEL,
        profile="p",
        engine="vllm",
        hardware="h",
        prefill_factor=1.0,
        decode_factor=1.0,
        num_prefill_points=1,
        num_decode_points=1,
        prefill_step_tokens=2048,
        prefill_rms_rel_before=0.0,
        prefill_rms_rel_after=0.0,
        decode_rms_rel_before=0.0,
        decode_rms_rel_after=0.0,
        method="-",
    )
    plain, wrapped = _measured(), CorrectedTiming(_measured(), one)
    for shape in (prefill_shape(700, 300), decode_shape(3, 3000), prefill_shape(4096)):
        assert wrapped.step_time_s(shape) == plain.step_time_s(shape)


def test_a_profile_round_trips_its_correction(tmp_path: Path) -> None:
    stored = derive_correction(_measured(), _profile(1.5, 0.8), measured_model=LABEL)
    path = tmp_path / "p.json"
    path.write_text(_profile(1.5, 0.8, measured_correction=stored).model_dump_json())
    assert CalibrationProfile.load(path).measured_correction == stored
    assert json.loads(path.read_text())["measured_correction"]["prefill_factor"] == pytest.approx(
        1.5
    )


def test_sim_applies_the_correction_to_the_real_measured_model(tmp_path: Path) -> None:
    """Llama-3.1-8B on an H100 priced by aiconfigurator-core (the gpu-data extra make test
    installs); a synthetic run twice as slow as the uncorrected model's prices (read from the
    plain measured model, which this module does not touch) gives factors 2 and the label."""
    import aiconfigurator_core  # noqa: F401  (never skipped: make test installs the extra)

    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.sim.fromplan import build_replica

    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", max_model_len=8192)
    plain = build_replica(request, timing_model="measured")
    assert "corrected" not in plain.timing_name
    assert isinstance(plain.timing, MeasuredTiming)  # the uncorrected path is the model itself
    t = plain.timing
    profile = _profile(
        1.0,
        1.0,
        prefill_points=[(n, 2 * t.prefill_time_s(n)) for n in (256, 512, 1024)],
        decode_points=[
            (b, b * c, 2 * t.decode_time_s(b, b * c)) for b, c in ((1, 512), (8, 1024), (32, 2048))
        ],
    )
    built = build_replica(request, timing_model="measured", profile=profile)
    assert built.timing_name == f"{plain.timing_name} corrected by h100-run"
    assert isinstance(built.timing, CorrectedTiming)
    assert built.timing.prefill_factor == pytest.approx(2.0)
    assert built.timing.decode_factor == pytest.approx(2.0)
    shape = decode_shape(16, 16 * 1500)
    assert built.timing.step_time_s(shape) == pytest.approx(2 * t.step_time_s(shape))
    # without --timing-model measured the profile is the calibrated model, as before
    calibrated = build_replica(request, profile=profile)
    assert calibrated.timing_name.startswith("calibrated (h100-run")


def test_unit_factors_leave_a_whole_run_unchanged_but_its_label(tmp_path: Path) -> None:
    """``sim --timing-model measured`` with and without a profile whose stored factors are
    exactly 1: the same figures; only the label (and the wall clock) differ."""
    import aiconfigurator_core  # noqa: F401
    from click.testing import CliRunner

    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.cli.sim import sim
    from kvbudget.sim.fromplan import build_replica

    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", max_model_len=8192)
    label = build_replica(request, timing_model="measured").timing_name
    # factors of exactly 1 (the fake's own points), stored under the real model's label
    stored = derive_correction(_measured(), _profile(1.0, 1.0), measured_model=label)
    assert (stored.prefill_factor, stored.decode_factor) == (1.0, 1.0)
    path = tmp_path / "one.json"
    path.write_text(_profile(1.0, 1.0, measured_correction=stored).model_dump_json())
    base = [
        *("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM", "--max-model-len", "8192"),
        *("--timing-model", "measured", "--num-requests", "40", "--json"),
    ]
    runs = []
    for extra in ([], ["--timing-profile", str(path)]):
        result = CliRunner().invoke(sim, [*base, *extra])
        assert result.exit_code == 0, result.output
        runs.append(json.loads(result.output))
    plain, one = runs
    assert one.pop("timing_model") == plain.pop("timing_model") + " corrected by h100-run"
    for doc in (plain, one):
        doc.pop("wall_s")
    assert one == plain
