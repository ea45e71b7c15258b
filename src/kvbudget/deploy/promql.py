"""PromQL text kvbudget deploy writes: label values escaped, durations and selectors checked as
Prometheus checks them, annotation text kept out of Go's template syntax.

Rules, from Prometheus' own parser (promql/parser/lex.go, model/time.go ``ParseDuration``) and
checked against ``promtool check rules`` in tests/unit/deploy and tests/fuzz:

* a label value is a double-quoted Go string: ``\\`` and ``"`` escaped, a newline written
  ``\\n`` (a raw newline ends the string), other control characters as ``\\xHH``;
* a duration is ``[Ny][Nw][Nd][Nh][Nm][Ns][Nms]`` in that order, each unit at most once, or
  ``0``, and at most 2^63-1 nanoseconds; a range (``[5m]``) must be greater than 0;
* alert annotations are Go templates: a literal ``{{`` or ``}}`` is written as an action that
  prints it.
"""

from __future__ import annotations

import re
import warnings

from kvbudget.errors import ConfigError

#: ASCII digits only: Python's \d also matches other scripts' digits ("૯᥏٣d"), which Prometheus'
#: parser refuses (found by tests/fuzz/test_deploy_report.py)
_DURATION = re.compile(
    r"(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?"
    r"(?:([0-9]+)ms)?"
)
_UNIT_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000, 1)
#: time.Duration is int64 nanoseconds
MAX_DURATION_MS = (2**63 - 1) // 1_000_000
_LABEL_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_GO_STRING = r'"(?:[^"\\\n]|\\.)*"'
_MATCHER = re.compile(rf"\s*({_LABEL_NAME})\s*(=~|!~|!=|=)\s*({_GO_STRING})\s*")
_SIMPLE_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b", "f": "\f", "n": "\n",
                   "r": "\r", "t": "\t", "v": "\v"}  # fmt: skip
#: Python-only regexp syntax RE2 (Go's regexp, which Prometheus uses) refuses: lookaround,
#: atomic/conditional/comment groups, ``(?P=name)``, flags other than i m s U, backreferences,
#: Python's ``\\Z \\N \\u \\U``, possessive repeats, counts over 1000, unknown POSIX classes
#: (conservative: ``[*+]`` and ``{1000}`` are refused too)
_NOT_RE2 = re.compile(
    r"\(\?(?:[=!>#(<]|P=)|\(\?[a-zA-Z-]*[aLux][a-zA-Z-]*[:)]|\\[1-9ZNuU]|[*+?}][+*]|\{\d{4,}"
    r"|\[:(?!(?:alnum|alpha|ascii|blank|cntrl|digit|graph|lower|print|punct|space|upper|word"
    r"|xdigit):\])[a-z]*:\]"
)


def shown(value: str, limit: int = 60) -> str:
    """A value as an error message echoes it: quoted, at most ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}...' ({len(value)} characters)"


def label_value(text: str) -> str:
    """``text`` as a PromQL double-quoted string literal (quotes included)."""
    out: list[str] = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            raise ConfigError(
                f"label value {shown(text)} holds a lone UTF-16 surrogate, which is not text; "
                "fix the model id",
                field="label value",
            )
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def duration_ms(value: str, *, flag: str, positive: bool) -> int:
    """A Prometheus duration in milliseconds; one-line ConfigError naming ``flag`` otherwise."""
    fix = "write e.g. 30s, 5m or 1h (units y w d h m s ms, largest first, each once)"
    match = _DURATION.fullmatch(value) if value not in ("", "0") else None
    if value == "0":
        total = 0
    elif match is None or not any(match.groups()):
        raise ConfigError(f"{flag}: {shown(value)} is not a Prometheus duration; {fix}", field=flag)
    else:
        total = sum(int(n) * unit for n, unit in zip(match.groups(), _UNIT_MS, strict=True) if n)
    if total > MAX_DURATION_MS:
        raise ConfigError(
            f"{flag}: {shown(value)} is longer than Prometheus' largest duration (2^63-1 ns, "
            "about 292 years); give a shorter one",
            field=flag,
        )
    if positive and total == 0:
        raise ConfigError(
            f"{flag}: {shown(value)} is zero; Prometheus refuses a zero range "
            "('duration must be greater than 0'); give e.g. 5m",
            field=flag,
        )
    return total


def _unquote(literal: str) -> str | None:
    """The value of a Go double-quoted string, or None for an escape Go refuses."""
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = body[i + 1]
        if esc in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[esc])
            i += 2
            continue
        width = {"x": 2, "u": 4, "U": 8}.get(esc)
        digits = body[i + 2 : i + 2 + width] if width else ""
        if not width or not re.fullmatch(r"[0-9a-fA-F]+", digits) or len(digits) != width:
            return None
        code = int(digits, 16)
        if (esc == "x" and code > 0x7F) or 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
            return None
        out.append(chr(code))
        i += 2 + width
    return "".join(out)


def check_selector(selector: str, *, flag: str = "--metric-selector") -> str:
    """Label matchers ``name="value", name=~"regexp"`` as the inside of ``{...}``; refused in one
    line when Prometheus would refuse them (so no alert of the file fails to load)."""
    fix = 'write label matchers such as namespace="prod",model_name="llama"'
    if "\n" in selector:
        raise ConfigError(f"{flag}: {shown(selector)} spans lines; {fix}", field=flag)
    pos = 0
    while True:
        match = _MATCHER.match(selector, pos)
        if match is None:
            raise ConfigError(
                f"{flag}: {shown(selector)} is not a list of label matchers (at character "
                f"{pos}); {fix}",
                field=flag,
            )
        value = _unquote(match.group(3))
        if value is None:
            raise ConfigError(
                f"{flag}: {shown(match.group(3))} has an escape PromQL does not read; {fix}",
                field=flag,
            )
        if match.group(2) in ("=~", "!~"):
            _check_regexp(value, flag)
        pos = match.end()
        if pos == len(selector):
            return selector
        if selector[pos] != ",":
            raise ConfigError(
                f"{flag}: {shown(selector)}: expected ',' at character {pos}; {fix}", field=flag
            )
        pos += 1


def _check_regexp(value: str, flag: str) -> None:
    try:
        with warnings.catch_warnings():  # "possible nested set": RE2's [[:alpha:]] is meant
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(value)
        bad = _NOT_RE2.search(value)
    except (re.error, RecursionError, OverflowError) as exc:
        reason = str(exc).split("\n")[0]
        bad = None
        raise ConfigError(
            f"{flag}: regexp {shown(value)} does not compile ({reason}); fix the regexp",
            field=flag,
        ) from None
    if bad is not None:
        raise ConfigError(
            f"{flag}: regexp {shown(value)} uses {bad.group()!r}, which Go's RE2 syntax "
            "(Prometheus) does not have; rewrite it without lookaround, backreferences or "
            "possessive repeats",
            field=flag,
        )


def template_literal(text: str) -> str:
    """``text`` as Go template text that prints itself (annotations are templates)."""
    return re.sub(r"\{\{|\}\}", lambda m: '{{ "' + m.group() + '" }}', text)
