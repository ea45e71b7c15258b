"""From llama.cpp timings (or the client clock) to fit observations; the planned series."""

from __future__ import annotations

import pytest

from kvbudget.calibrate.measure import ProbeResult, observations, request_overhead_s
from kvbudget.calibrate.run import missing_decode_points
from kvbudget.calibrate.series import Probe, SeriesSpec, plan_series, prefill_lengths
from kvbudget.errors import ConfigError
from kvbudget.load.client import StreamOutcome


def outcome(
    timings: dict[str, float] | None, sent: float = 0.0, tokens: tuple[float, ...] = ()
) -> StreamOutcome:
    out = StreamOutcome(request_id="x", sent_s=sent, server_timings=timings)
    out.chunk_times_s = list(tokens)
    out.first_token_s = tokens[0] if tokens else None
    return out


def test_prefill_point_from_llamacpp_timings() -> None:
    # llama.cpp reported 700 new tokens after 300 cached in 250 ms; n_ubatch 512 -> 2 ubatches
    timings = {"prompt_n": 700, "cache_n": 300, "prompt_ms": 250.0}
    probe = Probe("prefill", ((1,) * 1000,), 2, "p")
    (obs,) = observations([ProbeResult(probe, (outcome(timings, 0.0, (0.26,)),))], n_ubatch=512)
    assert obs.kind == "prefill" and obs.source == "engine"
    assert obs.seconds == pytest.approx(0.25)
    assert obs.num_steps == 2
    assert obs.prefill_tokens == 700
    # pairs: sum over the 700 new tokens of their position: 700 * 300 + 700 * 701 / 2
    assert obs.prefill_pairs == pytest.approx(700 * 300 + 700 * 701 / 2)


def test_decode_point_uses_the_request_whose_first_token_came_last() -> None:
    early = outcome({"prompt_n": 33, "predicted_n": 32, "predicted_ms": 900.0}, 0.0, (0.1,))
    late = outcome({"prompt_n": 33, "predicted_n": 32, "predicted_ms": 620.0}, 0.0, (0.4,))
    probe = Probe("decode", ((1,) * 32, (2,) * 32), 32, "d")
    (obs,) = observations([ProbeResult(probe, (early, late))], n_ubatch=512)
    assert obs.kind == "decode" and obs.batch_size == 2
    assert obs.num_steps == 31 and obs.seconds == pytest.approx(0.62)
    # context: 2 sequences x (31 steps x 33 + 0 + 1 + ... + 30)
    assert obs.decode_context_tokens == pytest.approx(2 * (31 * 33 + 30 * 31 / 2))


def test_client_clock_when_the_engine_reports_nothing() -> None:
    out = outcome(None, 1.0, (1.2, 1.25, 1.30, 1.35))
    out.usage_prompt_tokens = 64
    probe = Probe("decode", ((1,) * 64,), 4, "d")
    (obs,) = observations([ProbeResult(probe, (out,))], n_ubatch=512)
    assert obs.source == "client"
    assert obs.num_steps == 3 and obs.seconds == pytest.approx(0.15)
    pre = observations(
        [ProbeResult(Probe("prefill", ((1,) * 64,), 2, "p"), (outcome(None, 1.0, (1.2,)),))],
        n_ubatch=512,
    )
    assert pre[0].source == "client" and pre[0].seconds == pytest.approx(0.2)


def test_a_burst_on_the_client_clock_is_no_decode_point() -> None:
    # all four tokens read at one instant: the client saw no decode time, so no 0 s point
    out = outcome(None, 1.0, (1.2, 1.2, 1.2, 1.2))
    probe = Probe("decode", ((1,) * 64,), 4, "d")
    assert observations([ProbeResult(probe, (out,))], n_ubatch=512) == []


def test_metrics_histograms_are_used_before_the_client_clock() -> None:
    probe = Probe("prefill", ((1,) * 64,), 2, "p")
    deltas = {"engine_ttft_seconds_sum": 0.09, "engine_ttft_seconds_count": 1.0}
    res = ProbeResult(probe, (outcome(None, 1.0, (1.2,)),), deltas)
    (obs,) = observations([res], n_ubatch=512)
    assert obs.source == "metrics" and obs.seconds == pytest.approx(0.09)


def test_request_overhead_is_client_ttft_minus_engine_prompt_time() -> None:
    probe = Probe("prefill", ((1,),), 2, "p")
    results = [
        ProbeResult(probe, (outcome({"prompt_ms": 100.0, "prompt_n": 1}, 0.0, (0.104,)),)),
        ProbeResult(probe, (outcome({"prompt_ms": 50.0, "prompt_n": 1}, 0.0, (0.056,)),)),
        ProbeResult(probe, (outcome({"prompt_ms": 10.0, "prompt_n": 1}, 0.0, (0.015,)),)),
    ]
    assert request_overhead_s(results) == pytest.approx(0.005)  # median of 4, 6, 5 ms


def test_series_is_deterministic_bounded_and_covers_every_kind() -> None:
    spec = SeriesSpec(max_prompt_tokens=1000, max_batch=4, repeats=1)
    a, b = plan_series(spec), plan_series(spec)
    assert a == b
    assert {p.kind for p in a} == {"prefill", "prefix", "decode"}
    assert max(len(q) for p in a for q in p.prompts) <= 1000
    assert {len(p.prompts) for p in a if p.kind == "decode"} == {1, 2, 4}
    lengths = prefill_lengths(spec)
    assert lengths[0] == 16 and lengths[-1] == 1000 and len(lengths) == 7
    for p in a:
        if p.kind == "prefix":  # the second prompt starts with the first
            base, ext = p.prompts
            assert ext[: len(base)] == base and len(ext) > len(base)


def test_series_too_small_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_prompt_tokens"):
        SeriesSpec(max_prompt_tokens=32, max_batch=1)


def test_a_prefill_probe_gives_only_a_prefill_point() -> None:
    # its few decode steps are too short an interval to be a decode point
    timings = {"prompt_n": 900, "cache_n": 0, "prompt_ms": 200.0}
    timings |= {"predicted_n": 4, "predicted_ms": 30.0}
    probe = Probe("prefill", ((1,) * 900,), 4, "p")
    obs = observations([ProbeResult(probe, (outcome(timings, 0.0, (0.21,)),))], n_ubatch=512)
    assert [o.kind for o in obs] == ["prefill"]


def test_itl_histogram_only_when_all_prompts_fit_one_step() -> None:
    deltas = {"engine_itl_seconds_sum": 0.31, "engine_itl_seconds_count": 62.0}
    outs = (outcome(None, 0.0, (0.1, 0.11, 0.12)), outcome(None, 0.0, (0.1, 0.12, 0.14)))
    small = Probe("decode", ((1,) * 100, (2,) * 100), 3, "d")
    (obs,) = observations([ProbeResult(small, outs, deltas)], n_ubatch=512)
    assert obs.source == "metrics" and obs.seconds == pytest.approx(2 * 0.31 / 62)
    big = Probe("decode", ((1,) * 400, (2,) * 400), 3, "d")
    (obs,) = observations([ProbeResult(big, outs, deltas)], n_ubatch=512)
    assert obs.source == "client" and obs.seconds == pytest.approx(0.02)


def test_a_decode_probe_without_point_is_named() -> None:
    # two decode probes: one spread out, one whose tokens arrived at one instant
    spread = outcome(None, 1.0, (1.2, 1.25, 1.30, 1.35))
    burst = outcome(None, 1.0, (1.2, 1.2, 1.2, 1.2))
    probes = [Probe("decode", ((1,) * 64,), 4, f"d{k}") for k in range(2)]
    results = [ProbeResult(probes[0], (spread,)), ProbeResult(probes[1], (burst,))]
    obs = observations(results, n_ubatch=512)
    assert len(obs) == 1
    why = missing_decode_points(results, obs)
    assert why is not None and why.startswith("1 of 2 decode probes gave no point")
    assert missing_decode_points(results[:1], obs) is None
