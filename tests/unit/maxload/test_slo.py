"""``--slo`` as users write it: parsed terms, and one-line refusals naming the term and the fix."""

from __future__ import annotations

import pytest

from kvbudget.errors import ConfigError
from kvbudget.maxload.slo import LatencyTerm, parse_slo


def test_terms_units_and_goodput() -> None:
    slo = parse_slo("ttft_p95<1s, tpot_p95<50ms,itl_p99.9<=0.2s,e2el_mean<30s,goodput>=99%")
    assert slo.terms == (
        LatencyTerm("ttft", "p95", 1.0),
        LatencyTerm("tpot", "p95", 0.05),
        LatencyTerm("itl", "p99.9", 0.2),
        LatencyTerm("e2e", "mean", 30.0),
    )
    assert slo.goodput_min == pytest.approx(0.99)
    # goodput counts each request against the TTFT, TPOT and E2E values (not ITL: per token)
    spec = slo.per_request()
    assert (spec.ttft_s_max, spec.tpot_s_max, spec.e2e_s_max) == (1.0, 0.05, 30.0)


def test_bare_metric_is_a_per_request_threshold_for_goodput() -> None:
    slo = parse_slo("ttft<500ms,goodput>=0.9")
    assert slo.statistic_terms == ()
    assert slo.per_request().ttft_s_max == pytest.approx(0.5)
    assert slo.goodput_min == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("ttft_p95<1", ["'ttft_p95<1'", "no unit", "give s or ms"]),
        ("ttft_p95<1h", ["unit 'h'", "give s or ms"]),
        ("latency_p95<1s", ["names no metric", "ttft, tpot, itl, e2e"]),
        ("ttft_p100.5<1s", ["outside (0, 100]"]),
        ("ttft_q95<1s", ["statistic 'q95'", "pNN (p95), mean or median"]),
        ("ttft_p95>1s", ["not a ceiling", "'<'"]),
        ("goodput<0.9,ttft<1s", ["not a floor", "goodput>=0.99"]),
        ("goodput>=1.5,ttft<1s", ["not a fraction in (0, 1]"]),
        ("ttft<1s", ["no statistic and no goodput term", "goodput>=0.99"]),
        ("itl<50ms,goodput>=0.9", ["per token", "itl_p95<50ms"]),
        ("goodput>=0.9", ["no per-request threshold"]),
        ("ttft_p95<1s,,tpot_p95<50ms", ["is empty"]),
        ("ttft_p95<1s,ttft_p95<2s", ["given twice"]),
        ("", ["no term"]),
    ],
)
def test_malformed_slo_is_one_line_naming_the_text_and_the_fix(text: str, names: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_slo(text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"--slo {text!r}")
    for name in names:
        assert name in message, message
    assert info.value.field == "slo"
