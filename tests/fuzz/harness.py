"""Shared by the fuzz suites: run cases through driver.py and judge the results."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).with_name("driver.py")
ONE_LINE = re.compile(r"^(\w+Error|Error|accept): \S")
#: address-space cap of the driver process (a blow-up fails fast instead of eating the machine)
MEMORY_MIB = 3072


@dataclass
class Outcome:
    argv: list[str]
    rc: int | None
    err: str
    hang: bool
    died: bool = False
    last_line: str = ""


def run_cases(cases: list[dict[str, Any]], *, total_timeout_s: float = 900) -> list[Outcome]:
    """Every case's outcome (a case during which the driver died is ``died``; the rest rerun)."""
    outcomes: list[Outcome] = []
    todo = list(cases)
    while todo:
        proc = subprocess.run(
            [sys.executable, str(DRIVER), str(MEMORY_MIB)],
            input=json.dumps(todo),
            capture_output=True,
            text=True,
            timeout=total_timeout_s,
            env={**os.environ, "COLUMNS": "100"},
            check=False,
        )
        started: int | None = None
        for line in proc.stdout.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if not isinstance(item, dict):
                continue
            if "start" in item:
                started = int(item["start"])
                continue
            if "i" in item:
                outcomes.append(
                    Outcome(
                        todo[item["i"]]["argv"],
                        item["rc"],
                        item["err"],
                        item["hang"],
                        last_line=item.get("last_line", ""),
                    )
                )
                started = None
        if started is None:
            break
        outcomes.append(Outcome(todo[started]["argv"], None, proc.stderr[-2000:], False, died=True))
        todo = todo[started + 1 :]
    return outcomes


def problems(outcome: Outcome, *, must_fail: bool) -> list[str]:
    """What is wrong with one outcome (empty: it behaved)."""
    found: list[str] = []
    err = outcome.err
    if outcome.died:
        found.append(f"the process died (memory limit {MEMORY_MIB} MiB?): {err[-300:]}")
    if outcome.hang:
        found.append("ran past its time limit (hang or unbounded work)")
    if "Traceback" in err or "InternalError" in err or "ESCAPED" in err:
        found.append(f"crash: {err.strip()[-400:]}")
    if outcome.rc not in (None, 0) and outcome.last_line and not ONE_LINE.match(outcome.last_line):
        # (a non-zero exit with nothing on stderr is a documented answer, e.g. plan's 'does
        # not fit' exit 3 with the plan on stdout)
        found.append(f"error is not one 'Kind: message' line: {outcome.last_line[:300]}")
    if must_fail and outcome.rc == 0:
        found.append("exit 0 on invalid input")
    return found
