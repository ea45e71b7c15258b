"""Seeded fuzz of issue 30's classes owned by the request edges: Host headers to ``kvbudget
web``, credentials in URLs, sweep grid sizes, engine settings plan must refuse, and JSON bodies
to ``serve`` and ``web`` with NaN, Infinity, deep nesting and string/bool/number confusion.

Judged: no answer >= 500 and no traceback; every refusal in the documented shape; a foreign
Host never gets data; a credential never survives redaction; an oversized grid or an engine
setting vLLM refuses is never exit 0. Everything runs in-process, in a few seconds.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
from typing import Any

import aiohttp
import pytest
from fastapi.testclient import TestClient

from kvbudget.errors import ConfigError
from kvbudget.safety import redact
from kvbudget.web.app import create_app

SEED = 30_2026
RNG_CASES = 60
#: JSON texts Python's json module accepts though they are not JSON, and other confusions
HOSTILE_VALUES: list[str] = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    '"yes"',
    '"true"',
    '"1"',
    "1",
    "0",
    "true",
    "null",
    '"nan"',
    "[]",
    "{}",
    "9" * 400,
    '"' + "x" * 5000 + '"',
    "[" * 5000 + "]" * 5000,
    '{"a":' * 3000 + "1" + "}" * 3000,
]


def _rng() -> random.Random:
    return random.Random(SEED)


# ------------------------------------------------------------------ Host headers (web)
def _hostile_hosts(rng: random.Random) -> list[str]:
    fixed = [
        "evil.example.com",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "127.0.0.2",
        "0.0.0.0",
        "[::2]",
        "[::1",
        "::1]",
        "localhost:80@evil",
        "LOCALHOST.",
        " evil",
        "",
        "127.0.0.1 evil",
        "x" * 5000,
    ]
    alphabet = string.ascii_letters + string.digits + ".-:[]@_%"
    fixed += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(40)]
    return fixed


def test_web_answers_no_foreign_host() -> None:
    client = TestClient(create_app(), raise_server_exceptions=False)
    loopback = {"127.0.0.1", "localhost", "[::1]", "::1"}
    for host in _hostile_hosts(_rng()):
        response = client.get("/api/meta", headers={"Host": host})
        name = host.strip().lower()
        name = name.rsplit(":", 1)[0] if name.rsplit(":", 1)[-1].isdigit() else name
        if name in loopback:
            continue  # a random string that happens to be loopback
        assert response.status_code in (400, 421), (host[:80], response.status_code)
        assert set(response.json()) <= {"error", "field"}
        assert len(response.json()["error"]) < 600


# ------------------------------------------------------------------ credentials in URLs
def _credential_urls(rng: random.Random) -> list[tuple[str, str]]:
    """(url, secret) pairs: the secret in the userinfo or a query value."""
    out = []
    for _ in range(RNG_CASES):
        secret = "".join(
            rng.choice(string.ascii_letters + string.digits + "-_.~")
            for _ in range(rng.randint(4, 40))
        )
        host = rng.choice(["127.0.0.1:8000", "h", "[::1]:9", "api.example.com"])
        path = rng.choice(["", "/", "/v1", "/v1/completions"])
        where = rng.choice(["user", "password", "query", "query2"])
        if where == "user":
            url = f"http://{secret}@{host}{path}"
        elif where == "password":
            url = f"https://u:{secret}@{host}{path}"
        elif where == "query":
            url = f"http://{host}{path}?api_key={secret}"
        else:
            url = f"http://{host}{path}?a=1&token={secret}#frag"
        out.append((url, secret))
    return out


@pytest.mark.parametrize("spelling", ["plain", "json", "message"])
def test_no_credential_survives_redaction(spelling: str) -> None:
    redact.clear_secrets()
    try:
        for url, secret in _credential_urls(_rng()):
            text = {
                "plain": url,
                "json": json.dumps({"base_url": url}),
                "message": f"TargetError: cannot reach {url}/v1/models (refused); check it.",
            }[spelling]
            shown = redact.redact_text(text)
            assert secret not in shown, (url, shown)
            assert secret.encode() not in redact.redact_bytes(text.encode())
    finally:
        redact.clear_secrets()


# ------------------------------------------------------------------ grid sizes (sweep)
def test_grid_sizes_are_bounded_before_any_point() -> None:
    from kvbudget.safety.limits import MAX_SWEEP_POINTS
    from kvbudget.sweep.grid import grid_from_dict, grid_size

    rng = _rng()
    base = {"workload": {"num_requests": 10, "input_tokens": {"kind": "fixed", "value": 64}}}
    for _ in range(RNG_CASES):
        axes: dict[str, Any] = {}
        for name in ("tp", "max_num_seqs", "replicas", "max_model_len"):
            if rng.random() < 0.8:
                axes[name] = list(range(1, rng.choice([1, 7, 40, 300]) + 1))
        if rng.random() < 0.5:
            axes["rate_per_s"] = [float(i) for i in range(1, rng.choice([2, 50, 900]))]
        size = 1
        for values in axes.values():
            size *= len(values)
        data = {"base": base, "grid": axes}
        if size > MAX_SWEEP_POINTS:
            with pytest.raises(ConfigError, match=f"{size:,} points"):
                grid_from_dict(data)
        else:
            assert grid_size(grid_from_dict(data)) == size


# ------------------------------------------------------------------ engine settings (plan)
def test_plan_never_accepts_a_batch_budget_below_its_sequences() -> None:
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.capacity.planner import make_plan

    rng = _rng()
    for _ in range(12):
        seqs = rng.randint(2, 4096)
        budget = rng.randint(1, seqs - 1)
        request = PlanRequest(
            model="meta-llama/Llama-3.1-8B",
            gpu=rng.choice(["H100-SXM", "L4", "A100-80GB"]),
            max_num_batched_tokens=budget,
            max_num_seqs=seqs,
        )
        with pytest.raises(ConfigError, match="must be greater than or equal to max_num_seqs"):
            make_plan(request)


# ------------------------------------------------------------------ JSON bodies
def _bodies(rng: random.Random, fields: list[str]) -> list[bytes]:
    out = [value.encode() for value in HOSTILE_VALUES]  # the whole body
    for _ in range(RNG_CASES):
        chosen = rng.sample(fields, rng.randint(1, min(3, len(fields))))
        parts = [f'"{name}": {rng.choice(HOSTILE_VALUES)}' for name in chosen]
        out.append(("{" + ", ".join(parts) + "}").encode())
    return out


WEB_FIELDS = ["layers", "kv_heads", "head_dim", "dtype_bytes", "tokens", "seqs", "assumptions"]
WEB_PATHS = ["/api/calc/explicit", "/api/model", "/api/chart", "/api/document"]


def test_web_json_bodies() -> None:
    client = TestClient(create_app(), base_url="http://127.0.0.1", raise_server_exceptions=False)
    rng = _rng()
    for body in _bodies(rng, [*WEB_FIELDS, "model", "document", "gpu"]):
        path = rng.choice(WEB_PATHS)
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code < 500, (path, body[:80], response.text[:300])
        if response.status_code >= 400:
            data = response.json()
            assert set(data) <= {"error", "field"} and "\n" not in data["error"]
            assert "Traceback" not in data["error"] and len(data["error"]) < 800


SERVE_FIELDS = ["prompt", "max_tokens", "stream", "stream_options", "ignore_eos", "n", "messages"]


@pytest.mark.timeout(120)
def test_serve_json_bodies() -> None:
    from kvbudget.serve.app import ServeApp
    from kvbudget.serve.build import ServeEngineOptions, build_engine

    bodies = _bodies(_rng(), [*SERVE_FIELDS, "cache_salt", "model"])
    valid_bool = {b"true", b"false"}

    async def go() -> list[tuple[str, bytes, int, Any]]:
        built = build_engine(
            ServeEngineOptions(model="m", num_gpu_blocks=128, step_s=0.001, max_model_len=512)
        )
        seen = []
        async with (
            ServeApp(built.replica, model_name="m", max_model_len=512, timing_name="t") as app,
            aiohttp.ClientSession() as session,
        ):
            for i, body in enumerate(bodies):
                path = ["/v1/completions", "/v1/chat/completions", "/tokenize"][i % 3]
                async with session.post(
                    app.base_url + path, data=body, headers={"Content-Type": "application/json"}
                ) as r:
                    seen.append((path, body, r.status, await r.text()))
        return seen

    for path, body, status, text in asyncio.run(go()):
        assert status < 500, (path, body[:80], text[:300])
        if status >= 400:
            error = json.loads(text)["error"]
            assert error["code"] == status and "Traceback" not in error["message"]
        if b'"stream": ' in body and status == 200:
            value = body.split(b'"stream": ', 1)[1].split(b",")[0].split(b"}")[0]
            assert value in valid_bool | {b"null"}, body[:80]  # strict booleans only
