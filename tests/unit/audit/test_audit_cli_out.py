"""`kvbudget audit ... --out DIR` with an unwritable DIR fails before the run, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.cli.main import main


@pytest.mark.parametrize("command", ["isolation", "reuse"])
def test_unwritable_out_fails_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    out = blocker / "out"
    with pytest.raises(SystemExit) as info:
        main(["audit", command, "--target", "sim", "--out", str(out)])
    assert info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err  # no "Declared before the run" line: nothing ran
    assert lines[0].startswith("ConfigError: --out: ")
    assert str(out) in lines[0]
    assert captured.out == ""


@pytest.mark.parametrize("command", ["isolation", "reuse"])
def test_unreachable_base_url_says_so(capsys: pytest.CaptureFixture[str], command: str) -> None:
    # port 9 (discard) on loopback: nothing listens in the test environment
    with pytest.raises(SystemExit) as info:
        main(["audit", command, "--base-url", "http://127.0.0.1:9", "--model", "m"])
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines  # nothing declared for a run that cannot start
    last = lines[0]
    assert last.startswith("TargetError: --base-url: cannot reach http://127.0.0.1:9/v1/models")
    assert "check --base-url" in last
