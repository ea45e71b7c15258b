"""``kvbudget bench`` sends the workloads ``sim`` simulates (issue 31, "Percentiles and workloads").

A recording fake server (defined here) keeps every request body it got and answers with a
stream whose text and ``usage`` it chooses: prompt tokens = whitespace-separated words of the
prompt (kvbudget's synthetic tokenizer, which bench falls back to when the server has no
/tokenize), output = the words ``o0 o1 ...`` of ``max_tokens``. Every expected value below is
counted by hand from the inputs written in the test, or is that fake's definition.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kvbudget.cli.main import main
from kvbudget.records import RequestRecord, read_jsonl
from tests.integration.http_fakes import ThreadServer


class Recorder:
    """/v1/models lists ``m``; completions and chat stream ``max_tokens`` words ``o<i>``."""

    def __init__(self, step_s: float = 0.0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.times: list[float] = []
        self.step_s = step_s

    def app(self) -> web.Application:
        async def models(_: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": "m", "owned_by": "x"}]})

        async def complete(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.times.append(time.perf_counter())
            self.bodies.append(body)
            chat = "messages" in body
            prompt = (
                " ".join(m["content"] for m in body["messages"]) if chat else str(body["prompt"])
            )
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            n = int(body["max_tokens"])
            for i in range(n):
                if self.step_s:
                    await asyncio.sleep(self.step_s)
                piece = f"o{i}" if i == 0 else f" o{i}"
                choice = (
                    {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                    if chat
                    else {"index": 0, "text": piece, "finish_reason": None}
                )
                await resp.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n}
            last = {
                "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                "usage": usage,
            }
            await resp.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/completions", complete)
        app.router.add_post("/v1/chat/completions", complete)
        return app


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, str]]:
    rec = Recorder()
    with ThreadServer(rec.app) as server:
        yield rec, server.url


def _bench(capsys: pytest.CaptureFixture[str], url: str, out: Path, *extra: str) -> dict[str, Any]:
    argv = ["bench", "--base-url", url, "--timeout", "20", "--out", str(out), "--json"]
    with pytest.raises(SystemExit) as info:
        main([*argv, *extra])
    captured = capsys.readouterr()
    assert info.value.code in (0, None), captured.err
    return dict(json.loads(captured.out))


def _records(out: Path) -> list[RequestRecord]:
    return read_jsonl(out / "requests.jsonl", RequestRecord).items


PROMPTS = [
    "What is the capital of India?",  # 6 words
    "Name three rivers",  # 3 words
    "Explain paged attention to a new engineer in two sentences",  # 10 words
]


def _custom(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return path


@pytest.mark.timeout(60)
def test_custom_dataset_sent_in_file_order_with_its_token_counts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    doc = _bench(
        capsys,
        url,
        tmp_path / "run",
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(_custom(tmp_path)),
        "--disable-shuffle",
        "--num-requests",
        "3",
        "--output-tokens",
        "2",
    )
    assert [b["prompt"] for b in fake.bodies] == PROMPTS  # sent as written, in file order
    assert [b["max_tokens"] for b in fake.bodies] == [2, 2, 2]
    recs = sorted(_records(tmp_path / "run"), key=lambda r: r.request_id)
    assert [r.prompt_tokens for r in recs] == [6, 3, 10]  # the fake's usage: words
    assert doc["prompts"]["prompt_tokens_total"] == 6 + 3 + 10  # counted before sending
    assert doc["prompts"]["dataset_name"] == "custom"
    # private by default: the records keep hashes, never the text
    assert all(r.prompt_text is None and r.prompt_sha256 for r in recs)
    assert "capital" not in (tmp_path / "run" / "requests.jsonl").read_text()
    assert "capital" not in (tmp_path / "run" / "summary.json").read_text()


@pytest.mark.timeout(60)
def test_dataset_shuffled_as_vllm_shuffles_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    _bench(
        capsys,
        url,
        tmp_path / "run",
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(_custom(tmp_path)),
        "--seed",
        "7",
        "--output-tokens",
        "1",
    )
    # vLLM CustomDataset.load_data: random.seed(seed); random.shuffle(data)
    random.seed(7)
    expected = list(PROMPTS)
    random.shuffle(expected)
    assert [b["prompt"] for b in fake.bodies] == expected


@pytest.mark.timeout(60)
def test_sharegpt_first_turn_length_filter_and_output_length(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    data = [
        # sent: prompt 5 words, output = the reply's 4 words
        {
            "conversations": [
                {"from": "human", "value": "one two three four five"},
                {"from": "gpt", "value": "a b c d"},
            ]
        },
        # dropped: a single turn (vLLM keeps entries with two or more)
        {"conversations": [{"from": "human", "value": "alone here with words"}]},
        # dropped by is_valid_sequence: prompt of 3 words < 4
        {
            "conversations": [
                {"from": "human", "value": "too short prompt"},
                {"from": "gpt", "value": "w x y z"},
            ]
        },
        # sent: prompt 4 words, output 6 words
        {
            "conversations": [
                {"from": "human", "value": "p q r s"},
                {"from": "gpt", "value": "1 2 3 4 5 6"},
            ]
        },
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    doc = _bench(
        capsys,
        url,
        tmp_path / "run",
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(path),
        "--disable-shuffle",
    )
    assert [b["prompt"] for b in fake.bodies] == ["one two three four five", "p q r s"]
    assert [b["max_tokens"] for b in fake.bodies] == [4, 6]
    assert doc["prompts"]["dataset_dropped_by_length_filter"] == 1
    assert doc["requests_ok"] == 2


@pytest.mark.timeout(60)
def test_token_id_lines_are_decoded_with_the_served_tokenizer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    from kvbudget.workload.tokenizer import get_tokenizer

    fake, url = recorder
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps({"prompt_token_ids": [5, 6, 7], "output_tokens": 3}) + "\n")
    _bench(capsys, url, tmp_path / "run", "--dataset-name", "custom", "--dataset-path", str(path))
    # no /tokenize on the fake: the synthetic tokenizer is the served one here
    assert fake.bodies[0]["prompt"] == get_tokenizer(32000).decode([5, 6, 7])
    assert fake.bodies[0]["max_tokens"] == 3


@pytest.mark.timeout(60)
def test_trace_timestamps_are_honoured(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    trace = tmp_path / "trace.jsonl"
    lines = [
        {"timestamp": 1000, "input_length": 5, "output_length": 2, "hash_ids": []},
        {"timestamp": 1300, "input_length": 7, "output_length": 2, "hash_ids": []},
        {"timestamp": 1800, "input_length": 3, "output_length": 2, "hash_ids": []},
    ]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    _bench(capsys, url, tmp_path / "run", "--trace", str(trace), "--trace-speedup", "2")
    recs = sorted(_records(tmp_path / "run"), key=lambda r: r.scheduled_s or 0.0)
    # Mooncake ms from the first line, halved: 0, 150 ms, 400 ms
    assert [r.scheduled_s for r in recs] == pytest.approx([0.0, 0.15, 0.4])
    # each request waited for its time: never sent early (10 ms for the clock), and late by
    # less than a second; how late is the host's load (CI ran a request 386 ms late beside
    # three other test workers), so exact timing is a benchmark's matter, not this test's
    for r in recs:
        assert r.sent_s is not None and r.scheduled_s is not None
        assert r.scheduled_s - 0.01 <= r.sent_s < r.scheduled_s + 1.0, (r.scheduled_s, r.sent_s)
    assert [r.prompt_tokens for r in recs] == [5, 7, 3]
    # the server saw them in the trace's order, after one another
    assert len(fake.times) == 3 and fake.times == sorted(fake.times)
    assert [len(b["prompt"].split()) for b in fake.bodies] == [5, 7, 3]


@pytest.mark.timeout(60)
def test_trace_refuses_a_rate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "input_length": 3, "output_length": 1}\n')
    with pytest.raises(SystemExit) as info:
        main(["bench", "--base-url", "http://127.0.0.1:1", "--trace", str(trace), "--rate", "2"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--trace" in err and "drop --rate" in err


@pytest.mark.timeout(60)
def test_shared_prefix_groups_and_random_prefix_len(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    common = ["--concurrency", "1", "--output-tokens", "1", "--tokenizer", "synthetic"]
    # sim's names: one system prompt of 6 tokens inside a 10-token prompt
    _bench(
        capsys, url, tmp_path / "a", *common, "--num-requests", "4",
        "--input-tokens", "10", "--shared-prefix-tokens", "6",
    )  # fmt: skip
    words = [str(b["prompt"]).split() for b in fake.bodies]
    assert [len(w) for w in words] == [10] * 4
    assert len({tuple(w[:6]) for w in words}) == 1  # one shared prefix
    assert len({tuple(w[6:]) for w in words}) == 4  # unique tails
    # vLLM's --random-prefix-len: 5 shared tokens added before --input-tokens 8
    fake.bodies.clear()
    _bench(
        capsys, url, tmp_path / "b", *common, "--num-requests", "3",
        "--input-tokens", "8", "--random-prefix-len", "5",
    )  # fmt: skip
    words = [str(b["prompt"]).split() for b in fake.bodies]
    assert [len(w) for w in words] == [13] * 3
    assert len({tuple(w[:5]) for w in words}) == 1
    # groups: 2 groups of a 4-token prefix; within a group the prefix is one
    fake.bodies.clear()
    _bench(
        capsys, url, tmp_path / "c", *common, "--num-requests", "12",
        "--input-tokens", "9", "--prefix-groups", "2", "--shared-prefix-tokens", "4",
    )  # fmt: skip
    words = [str(b["prompt"]).split() for b in fake.bodies]
    assert [len(w) for w in words] == [9] * 12
    assert 1 <= len({tuple(w[:4]) for w in words}) <= 2


@pytest.mark.timeout(60)
def test_random_range_ratio_draws_within_vllm_bounds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    _bench(
        capsys, url, tmp_path / "r", "--concurrency", "2", "--num-requests", "20",
        "--input-tokens", "20", "--output-tokens", "10", "--random-range-ratio", "0.5",
        "--tokenizer", "synthetic",
    )  # fmt: skip
    lens = [len(str(b["prompt"]).split()) for b in fake.bodies]
    outs = [int(b["max_tokens"]) for b in fake.bodies]
    # vLLM: input in [floor(20 * 0.5), ceil(20 * 1.5)] = [10, 30]; output in [5, 15]
    assert all(10 <= n <= 30 for n in lens) and len(set(lens)) > 1
    assert all(5 <= n <= 15 for n in outs) and len(set(outs)) > 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "loop", [["--concurrency", "2"], ["--rate", "50"], ["--rate", "50", "--workers", "2"]]
)
def test_multi_turn_sessions_build_on_the_answers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, loop: list[str]
) -> None:
    fake = Recorder(step_s=0.01)
    with ThreadServer(fake.app) as server:
        _bench(
            capsys, server.url, tmp_path / "run", *loop, "--num-requests", "6",
            "--num-turns", "3", "--input-tokens", "4", "--output-tokens", "2",
            "--tokenizer", "synthetic",
        )  # fmt: skip
    recs = {r.request_id: r for r in _records(tmp_path / "run")}
    assert len(recs) == 6 and all(r.status == "ok" for r in recs.values())
    prompts = [str(b["prompt"]) for b in fake.bodies]
    by_session: dict[str, list[RequestRecord]] = {}
    for r in recs.values():
        assert r.session_id is not None
        by_session.setdefault(r.session_id, []).append(r)
    assert len(by_session) == 2
    for turns in by_session.values():
        turns.sort(key=lambda r: r.sent_s or 0.0)
        # each turn is sent after the previous one finished
        for a, b in itertools.pairwise(turns):
            assert (b.sent_s or 0.0) >= (a.done_s or 0.0)
        # prompt words: 4, then 4 + 2 answer + 4 = 10, then 10 + 2 + 4 = 16 (the fake's usage)
        assert [r.prompt_tokens for r in turns] == [4, 10, 16]
    # turn k's prompt is turn k-1's prompt, the fake's answer "o0 o1", then new words
    firsts = [p for p in prompts if len(p.split()) == 4]
    for first in firsts:
        second = next(p for p in prompts if p.startswith(first + " o0 o1 "))
        assert len(second.split()) == 10
        assert any(p.startswith(second + " o0 o1 ") and len(p.split()) == 16 for p in prompts)


@pytest.mark.timeout(60)
def test_multi_turn_chat_sends_the_conversation_as_messages(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    fake, url = recorder
    _bench(
        capsys, url, tmp_path / "run", "--endpoint", "chat", "--concurrency", "1",
        "--num-requests", "2", "--num-turns", "2", "--input-tokens", "3",
        "--output-tokens", "2", "--tokenizer", "synthetic",
    )  # fmt: skip
    first, second = fake.bodies
    assert [m["role"] for m in first["messages"]] == ["user"]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][0] == first["messages"][0]
    assert second["messages"][1]["content"] == "o0 o1"


@pytest.mark.timeout(60)
def test_goodput_counts_the_requests_meeting_every_slo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 10 ms per token, 3 tokens: TTFT ~10 ms, TPOT ~10 ms, E2E ~30 ms for every request
    fake = Recorder(step_s=0.01)
    with ThreadServer(fake.app) as server:
        loose = _bench(
            capsys, server.url, tmp_path / "a", "--concurrency", "1", "--num-requests", "4",
            "--output-tokens", "3", "--goodput", "ttft:1000,tpot:1000", "--goodput", "e2el:2000",
        )  # fmt: skip
        tight = _bench(
            capsys, server.url, tmp_path / "b", "--concurrency", "1", "--num-requests", "4",
            "--output-tokens", "3", "--goodput", "ttft:1000", "--goodput", "tpot:1",
        )  # fmt: skip
    assert loose["goodput_requests"] == 4 and loose["goodput_fraction"] == 1.0
    assert loose["goodput_slo_ms"] == {"ttft": 1000.0, "tpot": 1000.0, "e2el": 2000.0}
    assert loose["goodput_requests_per_s"] == pytest.approx(4 / loose["window_s"])
    assert tight["goodput_requests"] == 0 and tight["goodput_fraction"] == 0.0


def test_goodput_bad_key_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "--base-url", "http://127.0.0.1:1", "--num-requests", "1",
              "--goodput", "itl:5"])  # fmt: skip
    assert info.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and "'itl' is not an SLO key" in err[0]


@pytest.fixture
def serve_url() -> Iterator[str]:
    from kvbudget.serve.app import ServeApp
    from kvbudget.serve.build import ServeEngineOptions, build_engine

    def make() -> ServeApp:
        built = build_engine(ServeEngineOptions(model="tiny", step_s=0.001, num_gpu_blocks=512))
        return ServeApp(built.replica, model_name="tiny", max_model_len=4096)

    with ThreadServer(make) as server:
        yield server.url


@pytest.mark.timeout(120)
def test_end_to_end_against_kvbudget_serve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, serve_url: str
) -> None:
    """kvbudget serve counts prompts in kvbudget's synthetic tokenizer (one token a word)."""
    # a dataset: served as written, each prompt's words are its tokens
    doc = _bench(
        capsys, serve_url, tmp_path / "d", "--dataset-name", "custom",
        "--dataset-path", str(_custom(tmp_path)), "--disable-shuffle", "--output-tokens", "2",
        "--goodput", "ttft:60000,tpot:60000",
    )  # fmt: skip
    recs = sorted(_records(tmp_path / "d"), key=lambda r: r.request_id)
    assert [r.prompt_tokens for r in recs] == [6, 3, 10]
    assert doc["provenance"]["kind"] == "simulated"
    assert doc["goodput_requests"] == 3 and doc["goodput_fraction"] == 1.0
    # sessions of 3 turns over a shared system prompt of 4 tokens inside 8
    doc = _bench(
        capsys, serve_url, tmp_path / "s", "--concurrency", "2", "--num-requests", "6",
        "--num-turns", "3", "--input-tokens", "8", "--shared-prefix-tokens", "4",
        "--output-tokens", "2", "--metric-percentiles", "90,95",
    )  # fmt: skip
    recs = _records(tmp_path / "s")
    assert doc["requests_ok"] == 6
    for sid in {r.session_id for r in recs}:
        turns = sorted((r for r in recs if r.session_id == sid), key=lambda r: r.sent_s or 0.0)
        # 8; 8 + 2 answered + 8 = 18; 18 + 2 + 8 = 28
        assert [r.prompt_tokens for r in turns] == [8, 18, 28]
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for key in ("mean", "median", "p90", "p95", "p99"):
            assert doc[f"{metric}_{key}_s"] is not None


@pytest.mark.timeout(60)
def test_bench_sends_the_prompts_sim_simulates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recorder: tuple[Recorder, str]
) -> None:
    """The same flags and seed: bench's prompts are sim's planned prompts, in sim's order."""
    from kvbudget.cli.sim_scenario import scenario_from_opts
    from kvbudget.sim.scenario import build_workload
    from kvbudget.workload.tokenizer import get_tokenizer

    fake, url = recorder
    _bench(
        capsys, url, tmp_path / "run", "--concurrency", "1", "--num-requests", "5",
        "--input-tokens", "12", "--output-tokens", "3", "--prefix-groups", "2",
        "--shared-prefix-tokens", "5", "--seed", "3", "--tokenizer", "synthetic",
    )  # fmt: skip
    scenario = scenario_from_opts(
        {
            "num_requests": 5,
            "concurrency": 1,
            "input_tokens": 12,
            "output_tokens": 3,
            "prefix_groups": 2,
            "shared_prefix_tokens": 5,
            "seed": 3,
        }
    )
    planned, _ = build_workload(scenario)
    tok = get_tokenizer(32000)  # sim's and bench's default vocabulary
    assert [b["prompt"] for b in fake.bodies] == [tok.decode(r.prompt_token_ids) for r in planned]
    assert [b["max_tokens"] for b in fake.bodies] == [r.output_tokens for r in planned]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--num-requests", "2", "--prefix-groups", "2"], "give --shared-prefix-tokens too"),
        (
            ["--num-requests", "2", "--random-prefix-len", "4", "--shared-prefix-tokens", "4"],
            "give one",
        ),
        (["--num-requests", "2", "--random-range-ratio", "1.5"], "must be in [0, 1)"),
        (["--dataset-name", "custom"], "give --dataset-path"),
        (["--dataset-name", "custom", "--dataset-path", "/no/such.jsonl"], "no such file"),
        (["--trace", "/no/such.jsonl"], "no such file"),
        (["--duration", "5", "--num-turns", "2"], "give --num-requests"),
    ],
)
def test_workload_mistakes_are_one_line_before_any_request(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    # port 1: nothing listens; each mistake is found before the server is even asked
    with pytest.raises(SystemExit) as info:
        main(["bench", "--base-url", "http://127.0.0.1:1", *args])
    assert info.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("ConfigError:") and needle in err[0], err
