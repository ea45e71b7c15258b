"""`kvbudget bench` reads `vllm bench serve`'s flags with vLLM's meaning (docs/flags.md).

vLLM 0.32.0 ``vllm/benchmarks/serve.py``: ``--request-rate`` defaults to inf and is otherwise a
Poisson process (burstiness 1); ``--max-concurrency`` is a semaphore on requests in flight,
whatever the rate; ``--served-model-name`` is the name put in requests.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget.cli.main import main

BASE = ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m"]


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Stop at the first request: keep the RunConfig the flags produced."""
    import kvbudget.load.run as run_mod

    seen: dict[str, Any] = {}

    async def fake_run_load(cfg: Any, **_: Any) -> Any:
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr(run_mod, "run_load", fake_run_load)
    return seen


def _cfg(captured: dict[str, Any], argv: list[str]) -> Any:
    with pytest.raises(SystemExit):
        main([*BASE, *argv])
    return captured["cfg"]


def test_request_rate_alone_is_a_poisson_open_loop(captured: dict[str, Any]) -> None:
    cfg = _cfg(captured, ["--num-prompts", "10", "--request-rate", "4"])
    assert (cfg.shape, cfg.rate_per_s, cfg.num_requests) == ("poisson", 4.0, 10)


def test_max_concurrency_with_a_rate_caps_requests_in_flight(captured: dict[str, Any]) -> None:
    cfg = _cfg(captured, ["--num-prompts", "10", "--request-rate", "4", "--max-concurrency", "3"])
    assert (cfg.shape, cfg.max_inflight) == ("poisson", 3)


def test_max_concurrency_without_a_rate_is_the_closed_loop(captured: dict[str, Any]) -> None:
    cfg = _cfg(captured, ["--num-prompts", "10", "--max-concurrency", "5"])
    assert (cfg.shape, cfg.concurrency) == ("closed", 5)


def test_random_lengths_and_endpoint_path(captured: dict[str, Any]) -> None:
    cfg = _cfg(
        captured,
        [
            "--num-prompts", "1k", "--random-input-len", "1K", "--random-output-len", "2k",
            "--endpoint", "/v1/chat/completions", "--served-model-name", "served",
        ],
    )  # fmt: skip
    # 1k = 1,000 and 1K = 1,024 (vLLM's human_readable_int docstring)
    assert (cfg.num_requests, cfg.prompt_tokens, cfg.output_tokens) == (1000, 1024, 2000)
    assert (cfg.endpoint, cfg.model) == ("chat", "served")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--num-requests", "3", "--rate", "2", "--arrival", "closed"], "--rate 2: "),
        (["--num-requests", "3", "--rate", "2", "--concurrency", "4"], "--concurrency 4: "),
        (["--num-requests", "3", "--concurrency", "2", "--max-concurrency", "4"], "give one"),
        (["--num-requests", "3", "--endpoint", "/v2/x"], "--endpoint '/v2/x'"),
        (["--num-requests", "1.5K"], "--num-requests: '1.5K'"),
    ],
)
def test_contradictions_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*BASE, *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ConfigError: ") and needle in err, err


def test_metric_percentiles_reach_the_run_config(captured: dict[str, Any]) -> None:
    """vLLM's ``--metric-percentiles`` format ("25,50,75"); kvbudget's default 50,90,95,99
    (vLLM's own default is "99": serve.py, vLLM 0.32.0, lines 1811-1818)."""
    n = ["--num-prompts", "4"]
    chosen = _cfg(captured, [*n, "--metric-percentiles", "99,25"])
    assert chosen.metric_percentiles == (25.0, 99.0)
    assert _cfg(captured, n).metric_percentiles == (50.0, 90.0, 95.0, 99.0)
