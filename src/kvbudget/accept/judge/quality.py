"""Quality checkpoints judged on the output of the very requests that were timed.

Seed step 3: checkpoints cover facts, format, long-range dependency, tool arguments and the
refusal boundary — "not just that the output is non-empty". The simulator emits synthetic text,
so against ``sim`` every checkpoint is ``untested`` (never ``pass``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from jsonschema.exceptions import ValidationError as SchemaValidationError
from jsonschema.validators import validator_for

from kvbudget.accept.judge.verdicts import QualityOutcome
from kvbudget.accept.plan.checks import QualityCheckpoint

DEFAULT_REFUSAL_PATTERN = (
    r"(?i)\b(i can(?:no|')t|i am sorry|i'm sorry|i won't|i will not|unable to (?:help|assist)|"
    r"cannot (?:help|assist|comply))"
)
SIMULATED_REASON = "untested: simulated target, synthetic text (judge it on a real engine)"

_FENCE_RE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


def _normalize(text: str) -> str:
    return " ".join(text.strip().strip(".!。").split()).casefold()


def _first_json(text: str) -> Any:
    """The first JSON value in ``text`` (code fences allowed); ValueError if none."""
    cleaned = _FENCE_RE.sub("", text.strip())
    decoder = json.JSONDecoder()
    for i, ch in enumerate(cleaned):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(cleaned[i:])
            except json.JSONDecodeError:
                continue
            return value
    raise ValueError("no JSON value found in the output")


def judge_output(checkpoint: QualityCheckpoint, output: str) -> tuple[bool, str]:
    """(passed, why) for one output. Pure; never raises on bad output."""
    kind = checkpoint.kind
    if kind == "exact":
        expected = checkpoint.expected or ""
        lines = output.strip().splitlines()
        first = lines[0] if lines else ""
        ok = _normalize(output) == _normalize(expected) or _normalize(first) == _normalize(expected)
        return ok, "exact answer matched" if ok else "exact answer not found"
    if kind == "needle":
        ok = (checkpoint.expected or "") in output
        return ok, (
            f"needle at distance {checkpoint.distance_tokens} tokens recalled"
            if ok
            else f"needle at distance {checkpoint.distance_tokens} tokens missing from output"
        )
    if kind == "regex":
        ok = re.search(checkpoint.pattern or "", output) is not None
        return ok, "pattern matched" if ok else "pattern not matched"
    if kind == "json_schema":
        try:
            value = _first_json(output)
            schema = checkpoint.json_schema or {}
            validator_for(schema)(schema).validate(value)
        except (ValueError, SchemaValidationError) as exc:
            message = exc.message if isinstance(exc, SchemaValidationError) else str(exc)
            return False, f"JSON schema not satisfied: {message}"
        return True, "output satisfies the JSON schema"
    if kind == "tool_call":
        try:
            value = _first_json(output)
        except ValueError as exc:
            return False, f"no tool call: {exc}"
        if not isinstance(value, dict):
            return False, "tool call is not a JSON object"
        arguments = value.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return False, "tool-call arguments are not valid JSON"
        if value.get("name") != checkpoint.tool_name:
            return False, f"called tool {value.get('name')!r}, expected {checkpoint.tool_name!r}"
        if arguments != checkpoint.tool_arguments:
            return False, "tool-call arguments differ from the expected arguments"
        return True, "tool name and arguments match"
    pattern = checkpoint.pattern or DEFAULT_REFUSAL_PATTERN
    refused = re.search(pattern, output) is not None
    ok = refused == bool(checkpoint.should_refuse)
    side = "refused" if refused else "answered"
    want = "refuse" if checkpoint.should_refuse else "answer"
    return ok, f"model {side}; expected to {want}"


def evaluate_checkpoint(
    checkpoint: QualityCheckpoint,
    outputs: Sequence[str | None],
    *,
    simulated: bool,
) -> QualityOutcome:
    """Judge a checkpoint over the outputs of its timed requests in one cell."""
    if simulated:
        return QualityOutcome(checkpoint.id, "untested", SIMULATED_REASON)
    texts = [o for o in outputs if o is not None]
    if not texts:
        why = (
            "no prompt_file was given for this checkpoint"
            if checkpoint.prompt_file is None
            else "no output of the checkpoint's requests was received"
        )
        return QualityOutcome(checkpoint.id, "untested", f"untested: {why}")
    failures = []
    for text in texts:
        ok, why = judge_output(checkpoint, text)
        if not ok:
            failures.append(why)
    if failures:
        return QualityOutcome(
            checkpoint.id,
            "fail",
            f"{len(failures)} of {len(texts)} outputs failed: {failures[0]}",
            num_checked=len(texts),
            num_failed=len(failures),
        )
    return QualityOutcome(
        checkpoint.id, "pass", f"{len(texts)} of {len(texts)} outputs passed", len(texts), 0
    )
