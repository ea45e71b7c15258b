"""audit and calibrate against a server whose requests fail (issue 15, items 2 and 3).

The fake server's answers are chosen here (status 500 and MESSAGE), so the expected status, URL
and message in each line are the fake's, not the code under test's. Failed requests are a run
that failed (exit 4, ``RunFailed``, as bench and accept); 2 stays for bad input (an unserved
``--model``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kvbudget.calibrate.validate import CellLoad, measure_cell
from kvbudget.cli.main import main
from kvbudget.errors import RunFailedError
from kvbudget.load.client import OpenAIClient
from tests.integration.http_fakes import Fake, ThreadServer

MESSAGE = "engine exploded (fake)"


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return (code if isinstance(code, int) else 1), err[-1]


def _argvs(url: str, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "isolation": ["audit", "isolation", "--base-url", url + "/v1", "--trials", "5"],
        "reuse": ["audit", "reuse", "--base-url", url, "--prompts", "2"],
        "calibrate": ["calibrate", "--base-url", url, "--model", "m", "--repeats", "1",
                      "--out", str(tmp_path / "profile.json")],
    }  # fmt: skip


@pytest.mark.parametrize("which", ["isolation", "reuse", "calibrate"])
def test_failing_requests_exit_4_with_status_url_and_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str
) -> None:
    fake = Fake(["m"], lambda n: (500, MESSAGE))
    with ThreadServer(fake.app) as server:
        code, last = _run(capsys, _argvs(server.url, tmp_path)[which])
        url = server.url
        posts = fake.posts
    assert code == 4, last
    assert last.startswith("RunFailed: "), last
    # every request the fake answered failed, and the line counts exactly those
    assert f"all {posts} " in last and f"(HTTP 500 x{posts})" in last, last
    assert f"first HTTP 500 from {url}" in last and MESSAGE in last
    assert "Traceback" not in last


def test_calibrate_cell_with_some_failed_requests_is_a_failed_run() -> None:
    # the fake fails every second request: of 4 sent one at a time, 2 fail
    fake = Fake(["m"], lambda n: (500, MESSAGE) if n % 2 == 0 else (200, ""))
    load = CellLoad("short/single", tuple((7, 8, 9) for _ in range(4)), 2, 1)

    async def go(url: str) -> None:
        async with OpenAIClient(url, concurrency=2, timeout_s=30) as client:
            await measure_cell(client, "m", load, "fake")

    with ThreadServer(fake.app) as server:
        with pytest.raises(RunFailedError) as info:
            asyncio.run(go(server.url))
        url = server.url
    line = info.value.one_line()
    assert info.value.exit_code == 4
    assert line.startswith("RunFailed: cell short/single: 2 of 4 requests failed (HTTP 500 x2)")
    assert url in line and MESSAGE in line


@pytest.mark.parametrize("which", ["reuse", "calibrate"])
def test_unserved_model_is_refused_before_any_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str
) -> None:
    fake = Fake(["alpha"], lambda n: (200, ""))
    with ThreadServer(fake.app) as server:
        argv = _argvs(server.url, tmp_path)[which]
        if "--model" in argv:
            argv[argv.index("--model") + 1] = "zz"
        else:
            argv += ["--model", "zz"]
        code, last = _run(capsys, argv)
    assert code == 2
    assert last.startswith("TargetError: --model zz:") and "it serves alpha" in last, last
    assert fake.posts == 0


def test_isolation_whose_every_trial_fails_exits_4(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # each trial sends the victim's request, then the attacker's: every second POST fails,
    # so the first trial is half answered (no early stop) and no trial is complete
    fake = Fake(["m"], lambda n: (500, MESSAGE) if n % 2 == 0 else (200, ""))
    with ThreadServer(fake.app) as server:
        argv = _argvs(server.url, tmp_path)["isolation"] + ["--out", str(tmp_path / "iso")]
        code, last = _run(capsys, argv)
        url = server.url
    assert code == 4, last
    assert last.startswith("RunFailed: all ") and "trials failed" in last, last
    assert url in last and MESSAGE in last
    assert (tmp_path / "iso" / "audit-isolation.json").is_file()  # the result is kept
