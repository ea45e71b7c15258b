"""An existing read-only ``--out`` is one documented ConfigError line (issue 16), for bench,
accept, audit, report and sim, never a PermissionError traceback.

The suite runs as root, and root writes into a read-only directory regardless of its mode. So
each command runs in a child process whose capability bounding set lacks CAP_DAC_OVERRIDE,
CAP_DAC_READ_SEARCH and CAP_FOWNER (``prctl(PR_CAPBSET_DROP)``; at ``execve`` a root process's
permitted set is cut to it): still uid 0, so it can run the interpreter under ``/root`` and read
the repository, but the directory's mode now applies. (Switching to ``nobody`` would not work
here: the interpreter lives under ``/root``, mode 0700.) As an unprivileged user nothing needs
dropping: the mode applies anyway.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "acceptance-demo.yaml"
PR_CAPBSET_DROP = 24
#: linux/capability.h
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3
CLOSED = "http://127.0.0.1:9"  # nothing listens: a request would be a TargetError, not this


def _drop_file_overrides() -> None:
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(err)}")


def _run_unprivileged(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvbudget", *argv],
        preexec_fn=_drop_file_overrides,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    yield ro
    ro.chmod(0o755)


def test_the_child_really_cannot_write_there(read_only: Path) -> None:
    # the premise of the tests below: otherwise they would pass without testing anything
    probe = _run_unprivileged(["--version"])
    assert probe.returncode == 0, probe.stderr
    touch = subprocess.run(
        [sys.executable, "-c", f"open({str(read_only / 'x')!r}, 'w')"],
        preexec_fn=_drop_file_overrides,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert touch.returncode != 0 and "PermissionError" in touch.stderr


@pytest.fixture(scope="module")
def small_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.json of accept on a cut-down demo plan (simulated, a few requests per cell)."""
    root = tmp_path_factory.mktemp("ro-report")
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["load"]["repetitions"] = 1
    data["load"]["max_requests_per_cell"] = 3
    data["comparisons"] = []
    data["audits"] = {"isolation": False, "reuse": False}
    plan = root / "plan.yaml"
    plan.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvbudget",
            "accept",
            str(plan),
            "--out",
            str(root / "out"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr  # a verdict, not an error
    return root / "out" / "report.json"


COMMANDS = {
    "bench": ["bench", "--base-url", CLOSED, "--model", "m", "--num-requests", "2", "--out", "{RO}"],
    "accept": ["accept", str(DEMO), "--out", "{RO}"],
    "audit reuse": ["audit", "reuse", "--target", "sim", "--out", "{RO}"],
    "audit isolation": ["audit", "isolation", "--target", "sim", "--trials", "4", "--out", "{RO}"],
    "report": ["report", "{REPORT}", "--out", "{RO}"],
    "sim": ["sim", "--requests", "3", "--input-tokens", "64", "--output-tokens", "4",
            "--trace-out", "{RO}/trace.json"],
}  # fmt: skip


@pytest.mark.parametrize("name", list(COMMANDS))
@pytest.mark.parametrize("where", ["dir", "subdir"])
def test_read_only_out_is_one_config_error_line(
    name: str, where: str, read_only: Path, small_report: Path
) -> None:
    target = read_only if where == "dir" else read_only / "new"
    argv = [
        a.replace("{RO}", str(target)).replace("{REPORT}", str(small_report))
        for a in COMMANDS[name]
    ]
    proc = _run_unprivileged(argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "PermissionError" not in proc.stderr
    # docs/commands/*.md: "ConfigError: --out: cannot write to directory ... (Permission
    # denied); give a writable directory" (sim: "--trace-out PATH: directory ... is not writable")
    assert lines and lines[-1].startswith("ConfigError: --"), proc.stderr
    last = lines[-1]
    assert str(read_only) in last and ("Permission denied" in last or "not writable" in last), last
    assert list(read_only.iterdir()) == []  # nothing was written there
