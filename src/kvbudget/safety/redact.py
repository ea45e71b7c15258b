"""Secrets of this run (API keys), scrubbed from every artifact and message.

A key is registered once when it is read (:func:`register_secret`); from then on every document,
JSONL line, report and error message that kvbudget writes passes through :func:`redact_text` /
:func:`redact_obj`, so a server that echoes the ``Authorization`` header, the key in a body or in
its version string cannot get it into a file. The key's JSON-escaped and URL-encoded spellings
are scrubbed too. Registered secrets live in this process only (workers register their own).

Credentials written into a URL (``http://user:KEY@host``, ``?api_key=KEY``) are scrubbed without
being registered: :func:`redact_url` replaces a URL's userinfo and every query value by
``[redacted]``, and :func:`redact_text` / :func:`redact_bytes` apply it to every URL in the text,
so a URL is shown and stored only without its credentials, whoever prints it. A URL a run
connects to also registers its credentials (:func:`register_url_secrets`), so an error text or a
server's echo that quotes the key alone is scrubbed too.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from typing import Any

from kvbudget.errors import ConfigError

REDACTED = "[redacted]"

#: shortest secret accepted: shorter ones would scrub ordinary words from every artifact
MIN_SECRET_CHARS = 4

_SECRETS: set[str] = set()

#: a URL in free text: scheme, ``://``, then up to whitespace, a quote or an angle bracket
_URL = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s"'<>`]+""")
#: a URL's parts: scheme://, authority (userinfo@host:port), path, then ?query / #fragment
_URL_PARTS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)([^?#]*)(.*)", re.S)
#: query parameter names whose value is a credential whatever its length
_CREDENTIAL_NAME = re.compile(r"key|token|secret|auth|sig|pass|pwd|credential|session", re.I)
#: a query value this long is registered as a secret whatever its parameter's name
MIN_QUERY_SECRET_CHARS = 16
#: what an environment variable's name may be (POSIX: letters, digits, underscores)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


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
    # the value is never echoed: a key given in place of the variable's name must not reach
    # the terminal or a log (issue 30)
    if not _ENV_NAME.fullmatch(env_name):
        raise ConfigError(
            f"{flag}: the value given ({len(env_name)} characters, not shown) is not the name "
            f"of an environment variable; give the variable's NAME, e.g. export "
            f"OPENAI_API_KEY=... and {flag} OPENAI_API_KEY (never the key itself)",
            field=field,
        )
    value = os.environ.get(env_name)
    if not value:
        raise ConfigError(
            f"{flag}: the environment variable it names ({len(env_name)} characters, not "
            f"shown) is not set or empty; export it (the name, e.g. OPENAI_API_KEY, not the "
            f"key itself) or drop {flag}",
            field=field,
        )
    if len(value) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"{flag}: the key has {len(value)} characters; kvbudget "
            f"scrubs the key from every file it writes and needs at least {MIN_SECRET_CHARS}",
            field=field,
        )
    register_secret(value)
    return value


def _split_url(url: str) -> tuple[str, str, str, str, str] | None:
    """(scheme://, userinfo or "", host[:port], path, "?query#fragment" rest) of ``url``, split
    by hand (``urllib.parse.urlsplit`` refuses some hosts, e.g. ``[redacted]@h``); None when
    ``url`` has no ``scheme://``."""
    match = _URL_PARTS.match(url)
    if match is None:
        return None
    scheme, netloc, path, rest = match.groups()
    userinfo, at, host = netloc.rpartition("@")
    return scheme, userinfo if at else "", host, path, rest


def redact_url(url: str) -> str:
    """``url`` with its userinfo (``user:password@``) and every query value replaced by
    ``[redacted]``; scheme, host, port, path, parameter names and fragment kept. The one
    spelling of a URL kvbudget shows or stores."""
    parts = _split_url(url)
    if parts is None:
        return url
    scheme, userinfo, host, path, rest = parts
    query, hash_mark, fragment = rest.removeprefix("?").partition("#")
    if not rest.startswith("?"):
        query, hash_mark, fragment = "", "#" if rest else "", rest.removeprefix("#")
    items = []
    for item in query.split("&") if query else []:
        name, eq, _value = item.partition("=")
        items.append(f"{name}={REDACTED}" if eq else (REDACTED if item else item))
    netloc = f"{REDACTED}@{host}" if userinfo else host
    shown_query = f"?{'&'.join(items)}" if rest.startswith("?") else ""
    return f"{scheme}{netloc}{path}{shown_query}{hash_mark}{fragment}"


def register_url_secrets(url: str | None) -> None:
    """Register the credentials ``url`` carries (userinfo, and query values that are named like
    a credential or are long) as secrets, so a message quoting the key alone is scrubbed too."""
    parts = _split_url(url or "")
    if parts is None:
        return
    userinfo, rest = parts[1], parts[4]
    if userinfo:
        # the password, or the user name when it stands alone (``http://KEY@host``); a user
        # name beside a password is an ordinary word and stays
        user, colon, password = userinfo.partition(":")
        for piece in {userinfo, password if colon else user}:
            if piece != REDACTED:
                register_secret(urllib.parse.unquote(piece))
                register_secret(piece)
    query = rest.removeprefix("?").partition("#")[0] if rest.startswith("?") else ""
    for name, value in urllib.parse.parse_qsl(query):
        if _CREDENTIAL_NAME.search(name) or len(value) >= MIN_QUERY_SECRET_CHARS:
            register_secret(value)


def _redact_urls(text: str) -> str:
    if "://" not in text:
        return text

    def one(match: re.Match[str]) -> str:
        url = match.group(0)
        core = url.rstrip(".,;:!)]}")  # prose punctuation after a URL is not part of it
        return redact_url(core) + url[len(core) :]

    return _URL.sub(one, text)


def clear_secrets() -> None:
    """Forget every registered secret (tests)."""
    _SECRETS.clear()


def has_secrets() -> bool:
    return bool(_SECRETS)


def redact_text(text: str) -> str:
    """``text`` with every registered secret replaced by ``[redacted]``, and every URL in it
    without its credentials (:func:`redact_url`)."""
    if not text:
        return text
    text = _redact_urls(text)
    if not _SECRETS:
        return text
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_bytes(data: bytes) -> bytes:
    """``data`` with every registered secret (UTF-8) replaced, and every URL in it without
    its credentials."""
    if b"://" in data:
        data = _redact_urls(data.decode("utf-8", "surrogateescape")).encode(
            "utf-8", "surrogateescape"
        )
    if not _SECRETS:
        return data
    for secret in sorted(_SECRETS, key=len, reverse=True):
        raw = secret.encode("utf-8")
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    return data


def redact_obj(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, strings) with secrets (and URL credentials)
    scrubbed from every string, keys included; other values are returned as they are."""
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
