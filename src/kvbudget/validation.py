"""One line from a pydantic ``ValidationError``: the first problem, its field, value and fix.

Every input kvbudget validates with pydantic (plan files, scenarios, sweep grids, workloads,
traces, result documents, bench options) reports its first problem through
:func:`first_problem`, and the files through :func:`problem_line`:

* an unknown field: ``unknown field 'workload.foo' in scenario.yaml: remove it or see
  docs/simulator.md for the fields``;
* a missing one: ``missing field 'model' in ...: add it (see ...)``;
* a bad value: ``scenario field tp=0 in ...: Input should be greater than or equal to 1; fix the
  value (see ...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from kvbudget.errors import shown_value

#: pydantic's wrappers around a validator's own words
_MESSAGE_PREFIXES = ("Value error, ", "Assertion failed, ")


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """The first error of a ``ValidationError``, in kvbudget's terms."""

    #: the dotted field path (``workload.arrivals.rate_per_s``), with the caller's prefix
    where: str
    #: pydantic's error type (``extra_forbidden``, ``missing``, ``greater_than_equal``, ...)
    kind: str
    #: pydantic's message without its ``Value error, `` wrapper
    message: str
    #: the value given (``None`` when the field is missing)
    value: object
    #: the error's context (what a validator attached)
    context: dict[str, object]


def first_problem(exc: ValidationError, prefix: str = "") -> FieldProblem:
    """The first error of ``exc``; ``prefix`` is put before its field path (a nested model
    validated on its own: ``workload``)."""
    err = exc.errors(include_url=False)[0]
    loc = [str(part) for part in err["loc"] if not str(part).startswith("function-")]
    message = str(err["msg"])
    for wrapper in _MESSAGE_PREFIXES:
        message = message.removeprefix(wrapper)
    return FieldProblem(
        where=".".join(([prefix] if prefix else []) + loc),
        kind=str(err["type"]),
        message=message,
        value=err.get("input"),
        context=dict(err.get("ctx") or {}),
    )


def problem_line(problem: FieldProblem, *, what: str, origin: str, docs: str) -> str:
    """The one line for a file's (or a set of flags') first problem: ``what`` names the kind
    of input (``scenario``, ``grid``, ``workload``), ``origin`` where it came from, ``docs``
    where its fields are described."""
    where = problem.where or what
    if problem.kind == "extra_forbidden":
        return f"unknown field {where!r} in {origin}: remove it or see {docs} for the fields"
    if problem.kind == "missing":
        return f"missing field {where!r} in {origin}: add it (see {docs})"
    value = "{...}" if isinstance(problem.value, dict) else shown_value(problem.value)
    return (
        f"{what} field {where}={value} in {origin}: {problem.message}; fix the value (see {docs})"
    )
