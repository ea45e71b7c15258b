"""Parsing of the two logprobs shapes engines return for ``/v1/completions``.

Shapes: vLLM/SGLang legacy completions (``tokens``, ``top_logprobs`` as dicts; OpenAI's legacy
completions format) and llama.cpp's chat-style ``content`` list (copied from a response of
llama-server b1-0c1e570 to ``logprobs: 2``)."""

from __future__ import annotations

from kvbudget.audit.probe_http import _parse_logprobs


def test_vllm_legacy_shape() -> None:
    choice = {
        "text": " a b",
        "logprobs": {
            "tokens": [" a", " b"],
            "token_logprobs": [-0.1, -0.2],
            "top_logprobs": [{" a": -0.1, " c": -2.5}, {" b": -0.2, " d": -1.9}],
            "text_offset": [0, 2],
        },
    }
    tokens, tops = _parse_logprobs(choice)
    assert tokens == (" a", " b")
    assert tops == ({" a": -0.1, " c": -2.5}, {" b": -0.2, " d": -1.9})


def test_llamacpp_content_shape() -> None:
    choice = {
        "text": "putput",
        "logprobs": {
            "content": [
                {
                    "id": 631,
                    "token": "put",
                    "logprob": -10.319108963012695,
                    "top_logprobs": [
                        {"id": 631, "token": "put", "logprob": -10.319108963012695},
                        {"id": 65597, "token": ';",\n', "logprob": -10.419687271118164},
                    ],
                },
                {"id": 631, "token": "put", "logprob": -10.38, "top_logprobs": []},
            ]
        },
    }
    tokens, tops = _parse_logprobs(choice)
    assert tokens == ("put", "put")
    assert tops == ({"put": -10.319108963012695, ';",\n': -10.419687271118164}, {})


def test_no_logprobs() -> None:
    assert _parse_logprobs({"text": "x", "logprobs": None}) == (None, None)
    assert _parse_logprobs({"text": "x"}) == (None, None)


def test_credentials_in_the_base_url_are_never_kept() -> None:
    from kvbudget.audit.probe_http import redact_url

    assert redact_url("https://user:pw@host.example:8443/v1") == "https://host.example:8443/v1"
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


def test_prompts_become_served_token_ids_only_for_token_id_engines() -> None:
    import asyncio

    from kvbudget.audit.probe_http import HttpProbe

    async def go() -> None:
        async with HttpProbe("http://127.0.0.1:9", model="m") as probe:
            assert probe.served_prompt((1, 2, 3), "w1 w2 w3") == "w1 w2 w3"  # nothing resolved
            # llama.cpp and kvbudget serve keep the synthetic text (no request is sent)
            for engine in ("llama.cpp", "kvbudget-serve"):
                said = await probe._served_vocabulary({"engine": engine})
                assert said == "synthetic-tokenizer text" and probe.served_ids is None
            probe.served_ids = [10, 11, 12]  # a served vocabulary of three plain ids
            # id i -> allowed[i % 3]: a shared prefix stays shared, token for token
            assert probe.served_prompt((0, 1, 2, 3, 4), "") == [10, 11, 12, 10, 11]
            assert probe._ids_body((5,)) == {"prompt": [12]}

    asyncio.run(go())
