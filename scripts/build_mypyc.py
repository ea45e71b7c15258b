"""Compile the simulator's hot modules with mypyc into the user cache (``make install-test``).

Usage: ``.venv/bin/python scripts/build_mypyc.py [--modules a,b,...]``

The build goes to ``~/.cache/kvbudget/mypyc/<key>/<build>/`` (see ``kvbudget.sim.native``),
compiled by ``build_support/mypyc_build.py``, the same compile the build backend puts into a
wheel: the sources are copied to a scratch directory, compiled there with the installed mypy's
mypyc, and the extension modules moved into the cache with a manifest of every source file's
SHA-256. A rerun with unchanged sources builds nothing. Concurrent runs wait on one ``flock``.
An editable install (``pip install -e .``) with a compiler already made this build; this script
then prints that it is up to date.

No C compiler, no Python headers or no mypyc installed: prints why and exits 0 (the simulator
stays pure Python). A failed compile exits non-zero.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build_support"))

import mypyc_build  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", help="comma-separated kvbudget.sim modules (default: COMPILED)")
    args = ap.parse_args()
    src = REPO / "src"
    native = mypyc_build.load_native(src)
    modules = tuple(args.modules.split(",")) if args.modules else tuple(native.COMPILED)
    why = mypyc_build.missing_toolchain()
    if why is not None:
        print(f"mypyc build skipped: {why}; the simulator runs pure Python")
        return 0
    started = time.monotonic()
    try:
        target, built = mypyc_build.build_in_cache(src, REPO / "pyproject.toml", modules)
    except mypyc_build.BuildFailed as exc:
        raise SystemExit(str(exc)) from None
    what = f"mypyc {mypyc_build.mypy_version()}, {len(modules)} modules"
    if built:
        took = time.monotonic() - started
        print(f"mypyc build built ({took:.1f} s, {what}): {target}")
    else:
        print(f"mypyc build up to date ({what}): {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
