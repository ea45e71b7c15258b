"""Shared flag bounds (kvbudget.cli.guards): hostile numbers and text are one-line refusals."""

from __future__ import annotations

import pytest

from kvbudget.cli.main import main

BIG = "9" * 400


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["sim", "--seed", "-1"], "--seed"),
        (["bench", "--base-url", "http://x", "--model", "m", "--seed", "-1"], "--seed"),
        (["serve", "--seed", "-5"], "--seed"),
        (["serve", "--speedup", "nan"], "not a finite number"),
        (["serve", "--step-ms", "inf"], "not a finite number"),
        (["bench", "--base-url", "http://x", "--model", "m", "--baseline-s", "inf"], "finite"),
        (["bench", "--base-url", "http://x", "--model", "m", "--connect-timeout", "inf"], "finite"),
        (["bench", "--base-url", "http://x", "--model", "m", "--concurrency", BIG], "limit"),
        (["bench", "--base-url", "http://x", "--model", "m" * 5000], "characters"),
        (["plan", "--gpu", ""], "empty"),
        (
            [
                "calc",
                "--tokens",
                BIG,
                "--layers",
                "2",
                "--kv-heads",
                "1",
                "--head-dim",
                "8",
                "--dtype-bytes",
                "2",
            ],
            "limit",
        ),
        (
            [
                "calc",
                "--layers",
                "2147483648",  # 2^31: beyond every model dimension (1e8 answers, issue 16)
                "--kv-heads",
                "8",
                "--head-dim",
                "128",
                "--tokens",
                "10",
                "--dtype-bytes",
                "2",
            ],
            "2,147,483,647",
        ),
        (["sim", "--engine", "llamacpp", "--slots", "0"], "--slots"),
        (["sim", "--engine", "llamacpp", "--slots", "7638656406"], "--slots"),
        (["sim", "--rate", "1e-300"], "rate_per_s"),
    ],
)
def test_refused_in_one_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, err
    assert len(err.splitlines()) == 1, err
    assert needle in err
    assert "InternalError" not in err and "Traceback" not in err
