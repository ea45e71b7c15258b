"""Every CLI command has a docs page, and the group's one-line error contract holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kvbudget.cli.main import available_commands

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_command_has_a_docs_page() -> None:
    missing = [
        name
        for name in available_commands()
        if not (REPO_ROOT / "docs" / "commands" / f"{name}.md").is_file()
    ]
    assert not missing, f"CLI commands without docs/commands/<name>.md: {missing}"


def test_every_command_is_linked_from_docs_index() -> None:
    index = (REPO_ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    unlinked = [name for name in available_commands() if f"commands/{name}.md" not in index]
    assert not unlinked, f"docs/README.md does not link: {unlinked}"


def test_unknown_command_is_one_line_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget", "no-such-command"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("UsageError:")
    assert "Traceback" not in proc.stderr
