"""Run many ``kvbudget`` command lines in one resource-limited process (the fuzz suites' engine).

Reads a JSON list of cases (``{"argv": [...], "limit_s": N}``) on stdin; for each one prints
``{"start": i}`` before and ``{"i", "rc", "err", "out_tail", "hang", "wall_s"}`` after, one JSON
line each, flushed. Memory is capped with RLIMIT_AS (a blow-up is a MemoryError, which kvbudget
would report as an InternalError, or the driver's death, which the caller sees as a missing
result after a ``start``); a case past its time limit is interrupted by SIGALRM and reported as
a hang. Invoked as ``python driver.py MEMORY_MIB`` from tests/fuzz/*.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import sys
import tempfile
import time
from typing import Any


class Hang(BaseException):
    """A case ran past its limit (not an Exception: kvbudget's handlers never swallow it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _sandbox(tmp: str) -> str:
    """The case's working directory, two levels down in ``tmp``: a relative value such as
    ``../../etc/passwd`` then names ``tmp/etc/passwd`` (a decoy file made here), never the host's
    ``/etc/passwd``. The suite runs as root, so a value that escaped would overwrite real files
    (it did: a canary ``--metrics-textfile ../../etc/passwd`` replaced the host's /etc/passwd)."""
    work = os.path.join(tmp, "case", "cwd")
    os.makedirs(work)
    os.makedirs(os.path.join(tmp, "etc"))
    with open(os.path.join(tmp, "etc", "passwd"), "w", encoding="utf-8") as decoy:
        decoy.write("root:x:0:0:root:/root:/bin/bash\n")
    return work


def main() -> None:
    memory_mib = int(sys.argv[1])
    limit = memory_mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.environ["KVBUDGET_FUZZ"] = "1"
    os.environ.pop("KVBUDGET_DEBUG", None)
    cases = json.loads(sys.stdin.read())
    real_out, real_err = sys.stdout, sys.stderr
    from kvbudget.cli.main import main as kvbudget_main

    signal.signal(signal.SIGALRM, _alarm)
    for index, case in enumerate(cases):
        real_out.write(json.dumps({"start": index}) + "\n")
        real_out.flush()
        err, out = io.StringIO(), io.StringIO()
        sys.stdout, sys.stderr = out, err
        hang = False
        rc: int | None = 0
        started = time.monotonic()
        cwd = os.getcwd()
        with tempfile.TemporaryDirectory(prefix="kvbudget-fuzz-") as tmp:
            os.chdir(_sandbox(tmp))
            argv = [a.replace("{TMP}", tmp) for a in case["argv"]]
            signal.setitimer(signal.ITIMER_REAL, float(case.get("limit_s", 20)))
            try:
                kvbudget_main(argv)
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Hang:
                hang = True
                rc = None
            except BaseException as exc:
                rc = -1
                err.write(f"ESCAPED {type(exc).__name__}: {exc}\n")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                os.chdir(cwd)
        sys.stdout, sys.stderr = real_out, real_err
        text = err.getvalue()
        nonempty = [x for x in text.splitlines() if x.strip()]
        result = {
            "i": index,
            "rc": rc,
            "err": text[:1000] + ("..." + text[-1000:] if len(text) > 2000 else text[1000:]),
            "last_line": nonempty[-1][:300] if nonempty else "",
            "out_tail": out.getvalue()[-300:],
            "hang": hang,
            "wall_s": round(time.monotonic() - started, 3),
        }
        real_out.write(json.dumps(result) + "\n")
        real_out.flush()


if __name__ == "__main__":
    main()
