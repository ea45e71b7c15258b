"""`kvbudget sim --timing-profile` with a calibrated profile used outside its ranges says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kvbudget.sim.timing import CalibrationProfile, StepFit


def write_profile(path: Path) -> None:
    profile = CalibrationProfile(
        name="narrow",
        model_id="m",
        gpu="cpu",
        engine="llama.cpp test",
        prefill_points=[(16, 0.01), (64, 0.02), (128, 0.03)],
        decode_points=[(1, 10, 0.01), (2, 20, 0.02), (2, 40, 0.03)],
        fit=StepFit(
            step_overhead_s=0.001,
            prefill_per_token_s=1e-5,
            prefill_per_pair_s=0.0,
            decode_per_seq_s=1e-4,
            decode_per_context_token_s=0.0,
        ),
        valid_ranges={
            "prompt_tokens": (16.0, 512.0),
            "context_tokens": (16.0, 600.0),
            "batch_size": (1.0, 2.0),
        },
    )
    path.write_text(profile.model_dump_json())


def run_sim(profile: Path, input_tokens: int, concurrency: int) -> dict:
    cmd = [sys.executable, "-m", "kvbudget", "sim", "--timing-profile", str(profile)]
    cmd += ["--requests", "16", "--concurrency", str(concurrency), "--input-tokens"]
    cmd += [str(input_tokens), "--output-tokens", "8", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_out_of_range_use_is_a_note_in_the_sim_summary(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    write_profile(path)
    out = run_sim(path, 2000, 8)
    notes = " ".join(out["notes"])
    assert "prompt_tokens 2000 is outside the calibrated range [16, 512]" in notes
    inside = run_sim(path, 256, 1)
    assert not any("outside the calibrated range" in n for n in inside["notes"])
