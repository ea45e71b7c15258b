"""The JSON API with FastAPI's TestClient: figures, validation, one-line errors, headers.

Expected numbers are worked by hand here from the seed's formula
(2 x layers x kv_heads x head_dim x element_bytes x tokens x sequences), never copied from output.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from kvbudget.web.app import static_dir
from tests.unit.calc.helpers_calc import CALC_LLAMA_8B

SEED_EXAMPLE: dict[str, Any] = {
    "layers": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "dtype_bytes": 2,
    "tokens": 4096,
    "seqs": 8,
}
# 2 * 32 * 8 * 128 * 2 = 131,072 bytes per token; x 4096 = 512 MiB per sequence; x 8 = 4 GiB.
SEED_PER_TOKEN_BYTES = 2 * 32 * 8 * 128 * 2
SEED_PER_SEQUENCE_BYTES = SEED_PER_TOKEN_BYTES * 4096
SEED_TOTAL_BYTES = SEED_PER_SEQUENCE_BYTES * 8


@pytest.fixture(scope="module")
def all_assumptions(client: TestClient) -> dict[str, bool]:
    meta = client.get("/api/meta").json()
    return {a["key"]: True for a in meta["assumptions"]}


def figure(body: dict[str, Any], key: str) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {row["key"]: row for row in body["figures"]}
    return rows[key]


def test_seed_example_is_four_gib_exact(
    client: TestClient, all_assumptions: dict[str, bool]
) -> None:
    assert SEED_TOTAL_BYTES == 4 * 2**30 == 4_294_967_296
    response = client.post(
        "/api/calc/explicit", json={**SEED_EXAMPLE, "assumptions": all_assumptions}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "exact"
    assert figure(body, "per_token")["bytes"] == SEED_PER_TOKEN_BYTES
    assert figure(body, "per_sequence")["bytes"] == SEED_PER_SEQUENCE_BYTES
    assert figure(body, "total")["bytes"] == SEED_TOTAL_BYTES
    assert figure(body, "total")["gib"] == 4.0
    assert figure(body, "per_sequence")["mib"] == 512.0
    assert figure(body, "per_token")["mib"] == 0.125
    assert body["total_display"].startswith("4.00 GiB")


def test_doubling_tokens_or_halving_heads_is_linear(
    client: TestClient, all_assumptions: dict[str, bool]
) -> None:
    doubled = client.post(
        "/api/calc/explicit",
        json={**SEED_EXAMPLE, "tokens": 8192, "assumptions": all_assumptions},
    ).json()
    halved = client.post(
        "/api/calc/explicit",
        json={**SEED_EXAMPLE, "kv_heads": 4, "assumptions": all_assumptions},
    ).json()
    assert figure(doubled, "total")["bytes"] == 2 * SEED_TOTAL_BYTES
    assert figure(halved, "total")["bytes"] == SEED_TOTAL_BYTES // 2


def test_cli_style_counts_are_accepted(
    client: TestClient, all_assumptions: dict[str, bool]
) -> None:
    body = client.post(
        "/api/calc/explicit",
        json={**SEED_EXAMPLE, "tokens": "4Ki", "layers": "32", "assumptions": all_assumptions},
    ).json()
    assert figure(body, "total")["bytes"] == SEED_TOTAL_BYTES


def test_unticked_assumption_makes_structural_reference(
    client: TestClient, all_assumptions: dict[str, bool]
) -> None:
    key = next(iter(all_assumptions))
    body = client.post(
        "/api/calc/explicit",
        json={**SEED_EXAMPLE, "assumptions": {**all_assumptions, key: False}},
    ).json()
    assert body["status"] == "structural_reference"
    failing = [a for a in body["assumptions"] if not a["holds"]]
    assert [a["key"] for a in failing] == [key]
    # the number is still given, as a reference
    assert figure(body, "total")["bytes"] == SEED_TOTAL_BYTES


def test_no_assumptions_confirmed_is_not_exact(client: TestClient) -> None:
    body = client.post("/api/calc/explicit", json=SEED_EXAMPLE).json()
    assert body["status"] != "exact"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("layers", 0),
        ("kv_heads", -8),
        ("head_dim", 127.5),
        ("tokens", "many"),
        ("seqs", True),
        ("dtype_bytes", 3),
    ],
)
def test_bad_input_is_one_line_400_naming_the_field(
    client: TestClient, field: str, value: Any
) -> None:
    response = client.post("/api/calc/explicit", json={**SEED_EXAMPLE, field: value})
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == field
    line = body["error"]
    assert line.startswith("ConfigError: ")
    assert field in line
    assert "\n" not in line
    assert "Traceback" not in line


def test_missing_and_unknown_fields(client: TestClient) -> None:
    missing = client.post("/api/calc/explicit", json={"layers": 32})
    assert missing.status_code == 400
    assert missing.json()["error"].startswith("ConfigError: ")
    extra = client.post("/api/calc/explicit", json={**SEED_EXAMPLE, "layerz": 3})
    assert extra.status_code == 400
    assert "layerz" in extra.json()["error"]


def test_body_that_is_not_json(client: TestClient) -> None:
    response = client.post(
        "/api/calc/explicit", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"].startswith("ConfigError: ")


def test_security_headers_on_page_and_api(client: TestClient) -> None:
    for path in ("/", "/api/health", "/static/app.js", "/docs"):
        response = client.get(path)
        assert response.status_code == 200, path
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert "unsafe-eval" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"


STATIC_SCRIPTS = sorted(p.name for p in static_dir().glob("*.js"))


def test_page_and_docs_pull_nothing_from_other_origins(client: TestClient) -> None:
    assert {"app.js", "dom.js", "chart.js", "viewer.js", "api.js"} <= set(STATIC_SCRIPTS)
    paths = ["/", "/docs", "/static/style.css", *(f"/static/{name}" for name in STATIC_SCRIPTS)]
    for path in paths:
        text = client.get(path).text
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text
        assert "//cdn" not in text


def test_page_scripts_never_use_innerhtml(client: TestClient) -> None:
    for name in STATIC_SCRIPTS:
        text = client.get(f"/static/{name}").text
        assert "innerHTML" not in text
        assert "outerHTML" not in text
        assert "insertAdjacentHTML" not in text
        assert "eval(" not in text
        assert "document.write" not in text


def test_openapi_is_served_and_swagger_cdn_page_is_not(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert "/api/calc/explicit" in spec["paths"]
    assert "/api/model" in spec["paths"]
    docs = client.get("/docs").text
    assert "swagger-ui" not in docs.lower()
    assert client.get("/redoc").status_code == 404


def test_oversized_body_is_refused(client: TestClient) -> None:
    response = client.post(
        "/api/document",
        content=b"{}",
        headers={"Content-Type": "application/json", "Content-Length": str(64 * 2**20)},
    )
    assert response.status_code == 413
    assert response.json()["error"].startswith("ConfigError: ")


def test_document_header_is_checked(client: TestClient) -> None:
    doc = {
        "schema_version": 1,
        "kind": "sim",
        "tool": "kvbudget",
        "tool_version": "0.1.0",
        "created": "2026-11-30T10:00:00Z",
        "provenance": {"kind": "simulated", "timing_model": "roofline"},
        "figures": [{"name": "ttft_p50_s", "value": 0.25, "unit": "s", "kind": "simulated"}],
        "cells": [{"cell": "short/single", "verdict": "pass"}],
    }
    body = client.post("/api/document", json={"document": doc}).json()
    assert body["is_kvbudget_document"] is True
    assert body["provenance"] == "simulated (roofline)"
    assert body["figures"][0]["name"] == "ttft_p50_s"
    assert body["warnings"] == []


def test_document_without_provenance_is_flagged(client: TestClient) -> None:
    body = client.post("/api/document", json={"document": {"hello": "<script>"}}).json()
    assert body["is_kvbudget_document"] is False
    assert body["warnings"]
    refused = client.post("/api/document", json={"document": [1, 2]})
    assert refused.status_code == 400
    assert refused.json()["error"].startswith("ReportError: ")


def _without_times(doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(doc)
    doc["ledger"] = [{k: v for k, v in e.items() if k != "read_at"} for e in doc["ledger"]]
    return doc


def test_web_returns_the_cli_calc_document(client: TestClient) -> None:
    """Same library, same document: the web's raw calc equals `kvbudget calc --json`."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvbudget",
            "calc",
            *CALC_LLAMA_8B,
            "--seqs",
            "8",
            "--assume",
            "full_attention",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    cli_doc = json.loads(proc.stdout)
    web = client.post(
        "/api/calc/explicit", json={**SEED_EXAMPLE, "assumptions": {"full_attention": True}}
    ).json()
    assert _without_times(web["raw"]["calc"]) == _without_times(cli_doc)
    assert cli_doc["total_bytes"] == SEED_TOTAL_BYTES
    # and the command line the page shows is exactly that command
    assert web["cli"] == [
        "kvbudget calc --layers 32 --kv-heads 8 --head-dim 128 --dtype-bytes 2 --tokens 4096 "
        "--seqs 8 --assume full_attention"
    ]


def test_body_without_length_is_refused(client: TestClient) -> None:
    def chunks() -> Any:
        yield b'{"layers": 32}'

    response = client.post(
        "/api/calc/explicit", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 411
    assert response.json()["error"].startswith("ConfigError: ")


def test_long_bad_values_are_cut_in_the_error(client: TestClient) -> None:
    response = client.post("/api/calc/explicit", json={**SEED_EXAMPLE, "layers": ["x"] * 500})
    assert response.status_code == 400
    assert len(response.json()["error"]) < 400
