"""`kvbudget bench` option errors: one line naming the flag, the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.cli.main import main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--base-url", "notaurl"], "--base-url=notaurl: must start with http:// or https://"),
        (
            ["--base-url", "http://127.0.0.1:9", "--metrics-url", "127.0.0.1:9/metrics"],
            "--metrics-url=127.0.0.1:9/metrics: must start with http:// or https://",
        ),
        (["--base-url", "http://127.0.0.1:9", "--timeout", "-1"], "--timeout=-1.0: "),
    ],
)
def test_bad_option_is_one_line_before_any_request(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "--model", "m", "--num-requests", "1", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ConfigError: " + expected)


def test_unwritable_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    out = blocker / "out"
    with pytest.raises(SystemExit) as info:
        main(["bench", "--model", "m", "--num-requests", "1", "--base-url", "http://127.0.0.1:9",
              "--out", str(out)])  # fmt: skip
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ConfigError: --out: cannot write to directory '{out}'")
    assert len(err.splitlines()) == 1
