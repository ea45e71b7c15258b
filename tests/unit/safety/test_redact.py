"""Secrets registered once are scrubbed from text, bytes, JSON values and std streams."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbudget.records import JsonlWriter, Provenance, ResultDocument, write_document
from kvbudget.safety import redact

KEY = "sk-test-5f0c1e22-secret/+="


@pytest.fixture(autouse=True)
def _secret() -> Iterator[None]:
    redact.register_secret(KEY)
    yield
    redact.clear_secrets()


def test_every_spelling_is_scrubbed() -> None:
    text = f"Bearer {KEY} {json.dumps(KEY)} sk-test-5f0c1e22-secret%2F%2B%3D"
    out = redact.redact_text(text)
    assert "5f0c1e22" not in out
    assert out.count(redact.REDACTED) == 3
    assert redact.redact_obj({"h": [f"x{KEY}"], KEY: 1}) == {
        "h": [f"x{redact.REDACTED}"],
        redact.REDACTED: 1,
    }
    assert redact.redact_bytes(KEY.encode()) == redact.REDACTED.encode()


def test_short_secrets_are_not_registered() -> None:
    redact.clear_secrets()
    redact.register_secret("ab")
    assert not redact.has_secrets()
    assert redact.redact_text("about") == "about"


def test_files_and_streams_never_hold_the_key(tmp_path: Path) -> None:
    class Doc(ResultDocument):
        kind: str = "t"
        echoed: str

    write_document(
        tmp_path / "d.json", Doc(provenance=Provenance(kind="computed"), echoed=f"v {KEY}")
    )
    with JsonlWriter(tmp_path / "r.jsonl") as w:
        w.write({"authorization": f"Bearer {KEY}"})
    for name in ("d.json", "r.jsonl"):
        data = (tmp_path / name).read_text()
        assert "5f0c1e22" not in data
        assert redact.REDACTED in data
    sink = io.StringIO()
    stream = redact.RedactingStream(sink)
    stream.write(f"key={KEY}\n")
    assert sink.getvalue() == f"key={redact.REDACTED}\n"


def test_secret_from_env_reads_registers_and_refuses_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvbudget.errors import ConfigError

    assert redact.secret_from_env(None, flag="--api-key-env") is None
    monkeypatch.delenv("KVB_T_UNSET", raising=False)
    with pytest.raises(ConfigError) as unset:
        redact.secret_from_env("KVB_T_UNSET", flag="--tenant-b-api-key-env")
    assert unset.value.field == "tenant_b_api_key_env"
    # the value given is never echoed: it may be a key typed in place of the name (issue 30)
    assert unset.value.one_line().startswith("ConfigError: --tenant-b-api-key-env: ")
    assert "KVB_T_UNSET" not in unset.value.one_line()
    monkeypatch.setenv("KVB_T_SHORT", "abc")  # 3 characters: too short to scrub
    with pytest.raises(ConfigError, match="3 characters"):
        redact.secret_from_env("KVB_T_SHORT", flag="--api-key-env")
    monkeypatch.setenv("KVB_T_KEY", "sk-live-1234")
    assert redact.secret_from_env("KVB_T_KEY", flag="--api-key-env") == "sk-live-1234"
    assert redact.redact_text("auth sk-live-1234") == f"auth {redact.REDACTED}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pw@h:8000/v1", "http://[redacted]@h:8000/v1"),
        ("http://KEY@h/v1", "http://[redacted]@h/v1"),
        ("https://h/v1?api_key=K&x=1#top", "https://h/v1?api_key=[redacted]&x=[redacted]#top"),
        ("http://h/v1?K", "http://h/v1?[redacted]"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("http://h/p#f?not-a-query", "http://h/p#f?not-a-query"),
        ("http://[redacted]@h/", "http://[redacted]@h/"),
    ],
)
def test_redact_url_drops_userinfo_and_query_values(url: str, shown: str) -> None:
    assert redact.redact_url(url) == shown
    # and so does every text kvbudget writes, with no secret registered
    redact.clear_secrets()
    assert redact.redact_text(f"cannot reach {url}; check it") == f"cannot reach {shown}; check it"
    assert redact.redact_bytes(f'"{url}"'.encode()) == f'"{shown}"'.encode()


def test_url_credentials_are_registered_but_a_user_name_beside_a_password_is_not() -> None:
    redact.clear_secrets()
    redact.register_url_secrets("http://alice:pw-0123@h/v1?token=abcd&page=2")
    text = redact.redact_text("alice sent pw-0123 and abcd on page 2")
    assert text == "alice sent [redacted] and [redacted] on page 2"
