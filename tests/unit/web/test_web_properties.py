"""Properties of the API: bytes linear in tokens and sequences; any bad body is one 400 line."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbudget.web.app import create_app

CLIENT = TestClient(create_app(), base_url="http://127.0.0.1:8765")
FIELDS = ("layers", "kv_heads", "head_dim", "dtype_bytes", "tokens", "seqs")


def total_bytes(body: dict[str, Any]) -> int:
    response = CLIENT.post("/api/calc/explicit", json=body)
    assert response.status_code == 200, response.text
    rows = {row["key"]: row for row in response.json()["figures"]}
    value: int = rows["total"]["bytes"]
    return value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layers=st.integers(1, 128),
    kv_heads=st.integers(1, 64),
    head_dim=st.sampled_from([64, 80, 96, 128, 256]),
    dtype_bytes=st.sampled_from([1, 2, 4]),
    tokens=st.integers(1, 1 << 20),
    seqs=st.integers(1, 256),
)
def test_total_is_linear_in_tokens_and_sequences(
    layers: int, kv_heads: int, head_dim: int, dtype_bytes: int, tokens: int, seqs: int
) -> None:
    base = {
        "layers": layers,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "dtype_bytes": dtype_bytes,
    }
    one = total_bytes({**base, "tokens": tokens, "seqs": seqs})
    assert one == 2 * layers * kv_heads * head_dim * dtype_bytes * tokens * seqs
    assert total_bytes({**base, "tokens": 2 * tokens, "seqs": seqs}) == 2 * one
    assert total_bytes({**base, "tokens": tokens, "seqs": 3 * seqs}) == 3 * one


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 0),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not float(x).is_integer()),
    st.text(max_size=30).filter(lambda t: not t.strip().isdigit()),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), junk=JUNK)
def test_any_bad_value_is_one_400_line(field: str, junk: Any) -> None:
    body: dict[str, Any] = {
        "layers": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "dtype_bytes": 2,
        "tokens": 4096,
        "seqs": 8,
    }
    body[field] = junk
    response = CLIENT.post("/api/calc/explicit", json=body)
    assert response.status_code == 400, (field, junk, response.text)
    error = response.json()["error"]
    assert error.split(":", 1)[0] in {"ConfigError", "SpecError"}
    assert "\n" not in error
    assert field in error
