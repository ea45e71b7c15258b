#!/bin/sh
# Dead-code check (make test): vulture over the product, its tests, benchmarks and scripts.
# Only unused functions, methods, classes and imports fail the check (fields of dataclasses and
# pydantic models are read by name, which vulture cannot see). Real entry points that nothing
# calls by name are listed in [tool.vulture] of pyproject.toml (click commands, validators,
# asyncio protocol callbacks, pytest hooks).
set -eu
BIN=${BIN:-.venv/bin}
out=$("$BIN/vulture" 2>&1 | grep -E "unused (function|method|class|import)" || true)
if [ -n "$out" ]; then
  echo "$out"
  echo "dead code: remove it, or list a real entry point in [tool.vulture] ignore_names" >&2
  exit 1
fi
echo "dead code: none (vulture)"
