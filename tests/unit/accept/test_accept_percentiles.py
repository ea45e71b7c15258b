"""``kvbudget accept --metric-percentiles``: each cell's chosen percentiles in report.json, the
Markdown/HTML tables, the terminal and the latency chart; the stop conditions still judged at
their own percentile.

Expected percentiles are hand arithmetic with numpy's default (linear) definition, the one
``vllm bench serve`` uses (``np.percentile``): for n sorted values the q-th percentile sits at
rank ``(n - 1) q / 100`` between the two neighbouring values.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvbudget.accept.judge.stats import summarize, summary_percentiles
from kvbudget.accept.result import AcceptResult, MetricSummary, PercentileCI
from kvbudget.cli.main import main
from kvbudget.report.charts import latency_vs_load
from kvbudget.report.html import render_html
from kvbudget.report.markdown import render_markdown
from kvbudget.report.table_rows import pct_header, percentile_rows
from kvbudget.report.terminal import latency_header, latency_row, print_summary
from tests.fuzz.test_files import _small_plan
from tests.unit.report.test_report_render import make_doc

#: 1 .. 10 s
TEN = [float(i) for i in range(1, 11)]


def test_summary_adds_the_chosen_percentiles_by_hand() -> None:
    # n = 10, rank 9 q / 100: p75 -> 6.75 -> 7 + 0.75 x 1 = 7.75; p99.9 -> 8.991 -> 9.991;
    # p95 (a stop condition may gate it) -> 8.55 -> 9.55; the median -> 4.5 -> 5.5
    s = summarize(TEN, np.random.default_rng(0), percentiles=(75.0, 99.9))
    assert s.pct("p75") == pytest.approx(7.75)
    assert s.pct("p99.9") == pytest.approx(9.991)
    assert s.pct("p95") == pytest.approx(9.55) and s.pct("p50") == pytest.approx(5.5)
    assert s.mean == pytest.approx(5.5)  # 55 / 10
    assert sorted(s.percentiles) == ["p50", "p75", "p90", "p95", "p99", "p99.9"]
    # each resample gives every percentile: adding two leaves p95's CI as it was
    plain = summarize(TEN, np.random.default_rng(0))
    assert s.percentiles["p95"] == plain.percentiles["p95"]
    assert summary_percentiles((99.9,)) == (50.0, 90.0, 95.0, 99.0, 99.9)


def _doc(percentiles: list[float]) -> AcceptResult:
    doc = make_doc(name="<b>x</b>")
    doc.metric_percentiles = percentiles
    for cell in doc.cells:
        cell.summaries = {
            "ttft_s": MetricSummary(
                n=10,
                mean=5.5,
                percentiles={
                    "p50": PercentileCI(value=5.5, low=3.0, high=8.0),
                    "p95": PercentileCI(value=9.55),
                    "p99.9": PercentileCI(value=9.991),
                },
            ),
            "itl_s": MetricSummary(n=0, warnings=["no samples"]),
        }
    return doc


def test_tables_follow_the_documents_percentiles() -> None:
    doc = _doc([50.0, 99.0, 99.9])
    header = pct_header(doc.metric_percentiles)
    assert header[2:6] == ["mean", "median (p50) [95% CI]", "p99", "p99.9"]
    ttft, itl = percentile_rows(doc.cells[0], doc.metric_percentiles)
    assert ttft[:6] == ["ttft_s", "10", "5.5", "5.5 [3, 8]", "—", "9.991"]  # p99 not summarized
    assert itl[1:6] == ["0", "—", "—", "—", "—"]  # no token times: no ITL, said as —
    md = render_markdown(doc)
    assert "| metric (s) | n | mean | median (p50) [95% CI] | p99 | p99.9 |" in md
    assert "| p90 |" not in md  # not chosen
    html = render_html(doc)
    assert "<th>p99.9</th>" in html and "<b>x</b>" not in html and "&lt;b&gt;x" in html
    # the default (and a report.json from before the flag) keeps p90/p95/p99
    assert pct_header()[4:7] == ["p90", "p95", "p99"]
    data = make_doc().model_dump(mode="json")
    del data["metric_percentiles"]
    assert AcceptResult.model_validate(data).metric_percentiles == [50.0, 90.0, 95.0, 99.0]


def test_terminal_prints_each_cells_mean_median_and_chosen_percentiles(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _doc([50.0, 95.0, 99.9])
    assert latency_header(doc.metric_percentiles)[1] == "TTFT s: mean / median / p95 / p99.9"
    assert latency_row(doc.cells[0], doc.metric_percentiles)[1:3] == [
        "5.5 / 5.5 / 9.55 / 9.99",
        "—",
    ]
    print_summary(doc, {}, wall_s=None)
    out = capsys.readouterr().out
    assert "Latency per cell" in out and "9.55 / 9.99" in out


def test_latency_chart_draws_the_chosen_percentiles() -> None:
    doc = _doc([50.0, 95.0, 99.9])
    svg = latency_vs_load(doc)
    assert "median, p95, p99.9 with 95% CIs" in svg
    assert "p99.9" in svg and ">p90<" not in svg


def _run(tmp_path: Path, *extra: str) -> tuple[int, str, Path]:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(_small_plan()), encoding="utf-8")
    out = tmp_path / "out"
    try:
        main(["accept", str(plan), "--out", str(out), "--quiet", *extra])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, str(plan), out


def test_accept_flag_end_to_end_and_stops_at_their_own_percentile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, out = _run(tmp_path, "--metric-percentiles", "75,99.9")
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "report.json").read_text())
    assert doc["metric_percentiles"] == [50.0, 75.0, 99.0, 99.9]
    gated = [
        (metric, pct)
        for metric in ("ttft_s", "tpot_s")
        for pct in (_small_plan()["stop"].get(metric) or {})
    ]
    assert gated and all(pct not in ("p75", "p99.9") for _, pct in gated)  # none chosen
    judged = 0
    for cell in doc["cells"]:
        if not cell["summaries"] or not cell["summaries"]["ttft_s"]["n"]:
            continue
        ttft = cell["summaries"]["ttft_s"]["percentiles"]
        assert {"p75", "p99.9", "p90", "p95"} <= set(ttft)  # chosen, and every gateable one
        for metric, pct in gated:
            check = next(c for c in cell["checks"] if c.get("stop") == f"{metric} {pct}")
            if check.get("observed") is not None:  # judged at its own percentile
                assert check["observed"] == cell["summaries"][metric]["percentiles"][pct]["value"]
                judged += 1
    assert judged
    md = (out / "report.md").read_text()
    assert "| mean | median (p50) [95% CI] | p75 | p99 | p99.9 |" in md
    assert "<th>p99.9</th>" in (out / "report.html").read_text()


@pytest.mark.parametrize(("value", "item"), [("95,abc", "abc"), ("100", "100"), ("-5", "-5")])
def test_a_bad_value_is_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, item: str
) -> None:
    code, _, out = _run(tmp_path, "--metric-percentiles", value)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines()[-1] == (
        f"ConfigError: --metric-percentiles {value!r}: {item!r} is not a percentile between 0 "
        'and 100 (exclusive); give comma-separated numbers, e.g. "50,90,95,99"'
    )
    assert not out.exists()
