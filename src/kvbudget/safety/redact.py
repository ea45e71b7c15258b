"""Secrets of this run (API keys), scrubbed from every artifact and message.

A key is registered once when it is read (:func:`register_secret`); from then on every document,
JSONL line, report and error message that kvbudget writes passes through :func:`redact_text` /
:func:`redact_obj`, so a server that echoes the ``Authorization`` header, the key in a body or in
its version string cannot get it into a file. The key's JSON-escaped and URL-encoded spellings
are scrubbed too. Registered secrets live in this process only (workers register their own).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

from kvbudget.errors import ConfigError

REDACTED = "[redacted]"

#: shortest secret accepted: shorter ones would scrub ordinary words from every artifact
MIN_SECRET_CHARS = 4

_SECRETS: set[str] = set()


def _spellings(secret: str) -> set[str]:
    forms = {secret, json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe="")}
    return {f for f in forms if len(f) >= MIN_SECRET_CHARS}


def register_secret(secret: str | None) -> None:
    """Scrub ``secret`` (and its escaped spellings) from everything written from now on."""
    if secret and len(secret) >= MIN_SECRET_CHARS:
        _SECRETS.update(_spellings(secret))


def secret_from_env(env_name: str | None, *, flag: str) -> str | None:
    """The secret that environment variable ``env_name`` holds, registered for scrubbing (None
    when no variable is named). A one-line ConfigError naming ``flag`` when the variable is
    unset or empty, or the secret too short to scrub."""
    if env_name is None:
        return None
    field = flag.strip("-").replace("-", "_")
    value = os.environ.get(env_name)
    if not value:
        raise ConfigError(
            f"{flag} {env_name}: that environment variable is not set or empty; "
            f"export {env_name}=... or drop {flag}",
            field=field,
        )
    if len(value) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"{flag} {env_name}: the key has {len(value)} characters; kvbudget "
            f"scrubs the key from every file it writes and needs at least {MIN_SECRET_CHARS}",
            field=field,
        )
    register_secret(value)
    return value


def clear_secrets() -> None:
    """Forget every registered secret (tests)."""
    _SECRETS.clear()


def has_secrets() -> bool:
    return bool(_SECRETS)


def redact_text(text: str) -> str:
    """``text`` with every registered secret replaced by ``[redacted]``."""
    if not _SECRETS or not text:
        return text
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_bytes(data: bytes) -> bytes:
    """``data`` with every registered secret (UTF-8) replaced."""
    if not _SECRETS:
        return data
    for secret in sorted(_SECRETS, key=len, reverse=True):
        raw = secret.encode("utf-8")
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    return data


def redact_obj(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, strings) with secrets scrubbed from every
    string, keys included; other values are returned as they are."""
    if not _SECRETS:
        return value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_obj(k): redact_obj(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_obj(v) for v in value]
    return value


class RedactingStream:
    """A text stream proxy that scrubs secrets from every ``write`` (stdout, stderr)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(redact_text(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def redact_std_streams() -> None:
    """Route ``sys.stdout`` and ``sys.stderr`` through :class:`RedactingStream` (idempotent)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, RedactingStream):
            setattr(sys, name, RedactingStream(stream))
