"""Plain-text/Markdown rendering of a profile and of a validation report."""

from __future__ import annotations

from kvbudget.calibrate.engine import is_own_simulator
from kvbudget.calibrate.predict import ErrorRow
from kvbudget.calibrate.validate import TARGET_REL_ERROR, ValidationReport
from kvbudget.sim.timing import CalibrationProfile

_UNITS = {
    "ttft_p50_s": ("TTFT p50", "ms", 1e3),
    "ttft_p95_s": ("TTFT p95", "ms", 1e3),
    "tpot_p50_s": ("TPOT p50", "ms", 1e3),
    "tpot_p95_s": ("TPOT p95", "ms", 1e3),
    "throughput_tokens_per_s": ("throughput", "tok/s", 1.0),
    "peak_kv_usage": ("peak KV usage", "%", 100.0),
}


def profile_text(profile: CalibrationProfile) -> str:
    f = profile.fit
    lines = [
        f"calibration profile {profile.name} ({_timed_on(profile.engine)}; {profile.hardware})",
        f"  model {profile.model_id}; engine settings {profile.engine_settings}",
    ]
    if f is not None:
        lines += [
            "  fit (per step = per ubatch, seconds; non-negative least squares, relative weights):",
            f"    step overhead           {f.step_overhead_s * 1e3:.4f} ms",
            f"    prefill per token       {f.prefill_per_token_s * 1e6:.4f} us",
            f"    prefill per token pair  {f.prefill_per_pair_s * 1e9:.4f} ns",
            f"    decode per sequence     {f.decode_per_seq_s * 1e6:.4f} us",
            f"    decode per context tok  {f.decode_per_context_token_s * 1e9:.4f} ns",
        ]
    res = profile.residuals
    if res:
        lines.append(
            f"  residuals: {int(res.get('num_points', 0))} points, rms relative "
            f"{res.get('rms_rel', 0):.1%} (prefill {res.get('prefill_rms_rel', 0):.1%}, decode "
            f"{res.get('decode_rms_rel', 0):.1%}), max relative {res.get('max_rel', 0):.1%}"
        )
    lines.append(
        f"  request overhead (HTTP, tokenization): {profile.request_overhead_s * 1e3:.2f} ms"
    )
    for name, (lo, hi) in sorted(profile.valid_ranges.items()):
        lines.append(f"  valid {name}: {lo:g} .. {hi:g}")
    c = profile.measured_correction
    if c is not None:
        lines += [
            f"  corrects {c.measured_model}:",
            f"    prefill x{c.prefill_factor:.3f} (rms relative error on {c.num_prefill_points} "
            f"points {c.prefill_rms_rel_before:.1%} -> {c.prefill_rms_rel_after:.1%})",
            f"    decode  x{c.decode_factor:.3f} (rms relative error on {c.num_decode_points} "
            f"points {c.decode_rms_rel_before:.1%} -> {c.decode_rms_rel_after:.1%})",
        ]
    return "\n".join(lines)


def _timed_on(engine: str) -> str:
    if is_own_simulator(engine):
        return f"timed on {engine}: kvbudget's simulator served in real time, figures simulated"
    return f"measured on {engine}"


def _fmt(row: ErrorRow, value: float | None) -> str:
    if value is None or value != value:
        return "n/a"
    _, _, scale = _UNITS[row.metric]
    return f"{value * scale:.1f}"


def error_table(rows: list[ErrorRow], *, served: str = "measured") -> str:
    """Markdown: one line per cell and metric (``served``: what the engine's figures are)."""
    out = [
        f"| cell | role | metric | {served} (engine) | simulated (prediction) | relative error |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        label, unit, _ = _UNITS[r.metric]
        rel = "n/a (not measured)" if r.rel_error is None else f"{r.rel_error:+.1%}"
        out.append(
            f"| {r.cell_id} | {r.role} | {label} ({unit}) | {_fmt(r, r.measured)} | "
            f"{_fmt(r, r.predicted)} | {rel} |"
        )
    return "\n".join(out)


def validation_text(report: ValidationReport) -> str:
    worst = report.held_out_max_abs_rel_error
    verdict = "MET" if report.target_met else "NOT MET"
    lines = [
        profile_text(report.profile),
        "",
        f"{report.source}: {report.engine} on {report.hardware}; prediction: "
        + (report.cells[0].predicted.source if report.cells else "none"),
        "",
        error_table(report.errors, served=report.source),
        "",
        f"held-out cells, largest |relative error|: TTFT p50 {worst.get('ttft_p50_s', float('nan')):.1%}, "
        f"TPOT p50 {worst.get('tpot_p50_s', float('nan')):.1%} "
        f"(target within {TARGET_REL_ERROR:.0%}: {verdict})",
        f"calibration {report.calibration_wall_s:.0f} s, whole validation "
        f"{report.validation_wall_s:.0f} s",
    ]
    warnings = [w for c in report.cells for w in c.warnings]
    if warnings:
        lines += ["", "warnings:"] + [f"  - {w}" for w in warnings]
    return "\n".join(lines)
