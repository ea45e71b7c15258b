"""Compile the simulator's hot modules with mypyc into the user cache (``make install-test``).

Usage: ``.venv/bin/python scripts/build_mypyc.py [--modules a,b,...]``

The build goes to ``~/.cache/kvbudget/mypyc/<key>/<build>/`` (see ``kvbudget.sim.native``):
the sources are copied to a scratch directory, compiled there with the installed mypy's mypyc,
and the extension modules moved into the cache with a manifest of every source file's SHA-256.
A rerun with unchanged sources builds nothing. Concurrent runs wait on one ``flock``.

No C compiler or no mypyc installed: prints why and exits 0 (the simulator stays pure Python).
A failed compile exits non-zero.
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
os.environ["KVBUDGET_PURE_PYTHON"] = "1"  # the builder itself never loads a build
sys.path.insert(0, str(SRC))

from kvbudget.sim import native  # noqa: E402

#: builds kept in the cache (the oldest source keys are removed beyond this)
KEEP_KEYS = 12


def _module_file(module: str) -> Path | None:
    p = SRC / Path(*module.split("."))
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    if p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    return None


def import_closure(modules: tuple[str, ...]) -> list[Path]:
    """Every kvbudget source file the compiled modules import, transitively, with packages."""
    todo = [f"{native.PACKAGE}.{m}" for m in modules]
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue  # a name imported from a module, not a module
        seen[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise SystemExit(f"{path}: relative import; the closure needs absolute imports")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvbudget"):
                todo.append(str(node.module))
                todo.extend(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                todo.extend(a.name for a in node.names if a.name.startswith("kvbudget"))
    return sorted(p.relative_to(SRC) for p in seen.values())


def compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(os.environ.get("CC", cc).split()[0])


@contextmanager
def locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_id(files: dict[str, str], mypy_version: str) -> str:
    h = hashlib.sha256(f"{native.LAYOUT}\n{native.abi_tag()}\nmypy {mypy_version}\n".encode())
    for rel, digest in sorted(files.items()):
        h.update(f"{rel}\n{digest}\n".encode())
    return h.hexdigest()[:24]


def compile_into(modules: tuple[str, ...], key_dir: Path, mypy_version: str) -> Path:
    files = import_closure(modules)
    with tempfile.TemporaryDirectory(prefix="kvbudget-mypyc-") as tmp:
        work = Path(tmp) / "src"
        for rel in files:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(SRC / rel, work / rel)
        digests = {str(rel): native.file_digest(work / rel) for rel in files}
        bid = build_id(digests, mypy_version)
        target = key_dir / bid
        if (target / native.MANIFEST).is_file():
            return target
        shutil.copy2(REPO / "pyproject.toml", Path(tmp) / "pyproject.toml")
        sources = [str(native.module_path(Path("."), m)) for m in modules]
        cmd = [sys.executable, "-m", "mypyc", "--config-file", "../pyproject.toml", *sources]
        env = {k: v for k, v in os.environ.items() if k != "KVBUDGET_PURE_PYTHON"}
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-20000:] + proc.stderr[-20000:])
            raise SystemExit(f"mypyc failed (exit {proc.returncode}): {' '.join(cmd)}")
        suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
        libs = sorted(work.glob(f"*__mypyc{suffix}"))
        shims = [work / native.module_path(Path("."), m).with_suffix(suffix) for m in modules]
        missing = [str(s) for s in shims if not s.is_file()]
        if len(libs) != 1 or missing:
            raise SystemExit(f"mypyc built no group library or no module for {missing}")
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=key_dir))
        for so in [*libs, *shims]:
            shutil.copy2(so, staging / so.name)
        manifest = {
            "layout": native.LAYOUT,
            "modules": list(modules),
            "abi": native.abi_tag(),
            "mypyc_version": mypy_version,
            "group_lib": libs[0].name,
            "shims": [s.name for s in shims],
            "files": digests,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (staging / native.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        staging.rename(target)
        return target


def prune(root: Path, keep: Path) -> None:
    keys = sorted(
        (p for p in root.iterdir() if p.is_dir() and p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in keys[KEEP_KEYS - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", help="comma-separated kvbudget.sim modules (default: COMPILED)")
    args = ap.parse_args()
    modules = tuple(args.modules.split(",")) if args.modules else native.COMPILED
    try:
        from mypy.version import __version__ as mypy_version
    except ImportError:
        print("mypyc build skipped: mypy is not installed; the simulator runs pure Python")
        return 0
    if compiler() is None:
        print("mypyc build skipped: no C compiler found; the simulator runs pure Python")
        return 0
    root = native.cache_root()
    started = time.monotonic()
    key_dir = root / native.source_key(SRC, modules)
    live = {str(rel): native.file_digest(SRC / rel) for rel in import_closure(modules)}
    done = key_dir / build_id(live, mypy_version)
    if (done / native.MANIFEST).is_file():  # nothing to build: no need to wait on the lock
        print(f"mypyc build up to date (mypyc {mypy_version}, {len(modules)} modules): {done}")
        return 0
    with locked(root):
        key_dir.mkdir(parents=True, exist_ok=True)
        before = {p.name for p in key_dir.iterdir()}
        target = compile_into(modules, key_dir, mypy_version)
        os.utime(key_dir)
        prune(root, key_dir)
    fresh = "built" if target.name not in before else "up to date"
    took = time.monotonic() - started
    print(
        f"mypyc build {fresh} ({took:.1f} s, mypyc {mypy_version}, {len(modules)} modules): {target}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
