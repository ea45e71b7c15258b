"""The failure paths a new user hits first with ``kvbudget bench`` (issue 15, items 1-3 and 8).

Servers run in a background thread (``main`` owns the foreground event loop): kvbudget serve
for the happy path, and a tiny aiohttp app whose answers are chosen here, so every expected
count, status and message below is the fake server's definition, not the code under test's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbudget.cli.main import main
from kvbudget.records import RequestRecord, read_jsonl
from tests.integration.http_fakes import Fake, ThreadServer


def _bench(
    capsys: pytest.CaptureFixture[str], url: str, out: Path, *extra: str
) -> tuple[int, str, str]:
    argv = ["bench", "--base-url", url, "--num-requests", "6", "--concurrency", "2"]
    argv += ["--input-tokens", "8", "--output-tokens", "2", "--timeout", "20", "--out", str(out)]
    with pytest.raises(SystemExit) as info:
        main([*argv, *extra])
    captured = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), captured.out, captured.err


@pytest.fixture
def serve_url() -> Iterator[str]:
    from kvbudget.serve.app import ServeApp
    from kvbudget.serve.build import ServeEngineOptions, build_engine

    def make() -> ServeApp:
        built = build_engine(ServeEngineOptions(model="tiny", step_s=0.001, num_gpu_blocks=256))
        return ServeApp(built.replica, model_name="tiny", max_model_len=2048)

    with ThreadServer(make) as server:
        yield server.url


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_base_url_with_or_without_v1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, serve_url: str, suffix: str
) -> None:
    code, out, err = _bench(capsys, serve_url + suffix, tmp_path / "run", "--model", "tiny")
    assert code == 0, err
    assert f"POST {serve_url}/v1/completions" in " ".join(out.split())
    records = read_jsonl(tmp_path / "run" / "requests.jsonl", RequestRecord).items
    assert [r.status for r in records] == ["ok"] * 6
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["server"]["endpoint_url"] == f"{serve_url}/v1/completions"
    # item 8: every record of a run against kvbudget serve says simulated, like the summary
    assert summary["provenance"]["kind"] == "simulated"
    assert {r.source for r in records} == {"simulated"}


def test_model_left_out_takes_the_first_served(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, serve_url: str
) -> None:
    code, _out, err = _bench(capsys, serve_url, tmp_path / "run")
    assert code == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["server"]["model_sent"] == "tiny"


def test_unserved_model_is_refused_before_any_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake = Fake(["alpha", "beta"], lambda n: (200, ""))
    with ThreadServer(fake.app) as server:
        code, _out, err = _bench(capsys, server.url, tmp_path / "run", "--model", "gamma")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("TargetError: --model gamma:")
    assert "alpha, beta" in lines[0] and "nothing was sent" in lines[0]
    assert fake.posts == 0
    assert not (tmp_path / "run" / "requests.jsonl").exists()


def test_every_request_failing_exits_non_zero_with_the_servers_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake = Fake(["m"], lambda n: (500, "engine exploded (fake)"))
    with ThreadServer(fake.app) as server:
        code, _out, err = _bench(capsys, server.url + "/v1", tmp_path / "run", "--model", "m")
        url = server.url
    assert code == 4
    last = err.strip().splitlines()[-1]
    assert last.startswith("RunFailed: all 6 requests failed (HTTP 500 x6)"), last
    assert f"{url}/v1/completions" in last and "engine exploded (fake)" in last
    # nothing recorded is lost: the six records and the summary are on disk
    records = read_jsonl(tmp_path / "run" / "requests.jsonl", RequestRecord).items
    assert len(records) == 6 and all(r.http_status == 500 for r in records)
    assert (tmp_path / "run" / "summary.json").is_file()


def test_a_declared_error_fraction(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # requests 1, 3, 5 fail: half of six
    fake = Fake(["m"], lambda n: (429, "slow down") if n % 2 else (200, ""))
    with ThreadServer(fake.app) as server:
        code, _out, err = _bench(capsys, server.url, tmp_path / "a", "--model", "m")
        assert code == 0, err  # by default only a run in which every request failed
        code, _out, err = _bench(
            capsys, server.url, tmp_path / "b", "--model", "m", "--max-error-fraction", "0.25"
        )
    assert code == 4
    last = err.strip().splitlines()[-1]
    assert last.startswith("RunFailed: 3 of 6 requests failed (more than the allowed 25%)"), last
    assert "HTTP 429" in last and "slow down" in last
