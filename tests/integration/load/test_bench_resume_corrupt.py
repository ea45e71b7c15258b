"""``bench --resume`` on a directory whose run.json is not a run file (issue 16: hostile input
files): one ConfigError line naming the file, nothing sent, the file left as it was. Before,
invalid UTF-8, bad JSON or a 100,000-deep array there was an InternalError."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.cli.main import main
from tests.integration.http_fakes import Fake, ThreadServer

CORRUPT = {
    "utf16": '{"config": {}}'.encode("utf-16"),
    "not-json": b"{config: nope",
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "no-config": b'{"something": 1}',
}


@pytest.mark.parametrize("which", list(CORRUPT))
def test_corrupt_run_file_is_one_line_and_nothing_is_sent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_bytes(CORRUPT[which])
    fake = Fake(["m"], lambda n: (200, ""))
    with ThreadServer(fake.app) as server:
        argv = ["bench", "--base-url", server.url, "--model", "m", "--num-requests", "2",
                "--out", str(out), "--resume", "--no-progress"]  # fmt: skip
        with pytest.raises(SystemExit) as info:
            main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert info.value.code == 2, err
    assert err[-1].startswith("ConfigError: --resume:") and "run.json" in err[-1], err
    assert fake.posts == 0
    assert (out / "run.json").read_bytes() == CORRUPT[which]
