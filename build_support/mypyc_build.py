"""Compile the simulator's hot modules with mypyc: the one build used by the wheel and the cache.

Two callers, one compile (:func:`compile_build`):

- the build backend (``setup.py``'s ``build_py``): a wheel gets the compiled modules inside the
  package, ``kvbudget/sim/_mypyc/``; an editable install (``pip install -e``, ``make install``)
  gets them in the user cache, as below, since its sources keep changing;
- ``scripts/build_mypyc.py`` (``make install-test``): the user cache,
  ``~/.cache/kvbudget/mypyc/<key>/<build>/`` (see ``kvbudget.sim.native``), kept per source
  hash, a rerun with unchanged sources builds nothing, concurrent runs wait on one ``flock``.

A build directory holds the mypyc group library, one shim per compiled module and
``manifest.json`` with the SHA-256 of every kvbudget source file mypyc read; ``kvbudget.sim.native``
loads it only while every one of them still hashes the same.

``KVBUDGET_MYPYC`` chooses: unset or ``auto`` compiles when mypy, a C compiler and the Python
headers are present and falls back to pure Python with one line otherwise (or when the compile
fails); ``0`` never compiles; ``1`` compiles or fails.

Standard library only, and it never imports ``kvbudget`` (``native.py`` is loaded from its file):
the build backend runs it before anything is installed.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
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
from types import ModuleType

MODE_ENV = "KVBUDGET_MYPYC"
#: builds kept in the cache (the oldest source keys are removed beyond this)
KEEP_KEYS = 12


class BuildFailed(RuntimeError):
    """mypyc ran and failed (code mypy accepts but mypyc rejects, or a broken toolchain)."""


def load_native(src_root: Path) -> ModuleType:
    """``kvbudget/sim/native.py`` of ``src_root``, loaded from its file (no kvbudget import)."""
    path = src_root / "kvbudget" / "sim" / "native.py"
    spec = importlib.util.spec_from_file_location("_kvbudget_native_for_build", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mode() -> str:
    """``auto``, ``off`` or ``required``, from ``KVBUDGET_MYPYC``."""
    raw = os.environ.get(MODE_ENV, "auto").strip().lower()
    if raw in ("", "auto"):
        return "auto"
    if raw in ("0", "off", "no", "false"):
        return "off"
    if raw in ("1", "on", "yes", "true", "required"):
        return "required"
    raise SystemExit(f"{MODE_ENV}={raw!r}: not a choice; use auto (default), 0 (never) or 1 (must)")


def compiler() -> str | None:
    """The C compiler the build would use (``$CC`` or Python's), when it is on ``PATH``."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(os.environ.get("CC", cc).split()[0])


def mypy_version() -> str | None:
    try:
        from mypy.version import __version__
    except ImportError:
        return None
    return str(__version__)


def missing_toolchain() -> str | None:
    """Why this interpreter cannot compile (``None``: it can): the first missing piece."""
    if compiler() is None:
        return "no C compiler found"
    include = sysconfig.get_paths().get("include", "")
    if not (Path(include) / "Python.h").is_file():
        return f"no Python headers ({include}/Python.h; the python3-dev package)"
    if mypy_version() is None:
        return "mypy (mypyc) is not installed"
    return None


def _module_file(src_root: Path, module: str) -> Path | None:
    p = src_root / Path(*module.split("."))
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    if p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    return None


def import_closure(src_root: Path, modules: tuple[str, ...], package: str) -> list[Path]:
    """Every kvbudget source file the compiled modules import, transitively, with packages."""
    todo = [f"{package}.{m}" for m in modules]
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(src_root, name)
        if path is None:
            continue  # a name imported from a module, not a module
        seen[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise BuildFailed(f"{path}: relative import; the closure needs absolute imports")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvbudget"):
                todo.append(str(node.module))
                todo.extend(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                todo.extend(a.name for a in node.names if a.name.startswith("kvbudget"))
    return sorted(p.relative_to(src_root) for p in seen.values())


def closure_digests(src_root: Path, modules: tuple[str, ...]) -> dict[str, str]:
    native = load_native(src_root)
    return {
        str(rel): native.file_digest(src_root / rel)
        for rel in import_closure(src_root, modules, native.PACKAGE)
    }


def build_id(native: ModuleType, files: dict[str, str], mypy: str) -> str:
    h = hashlib.sha256(f"{native.LAYOUT}\n{native.abi_tag()}\nmypy {mypy}\n".encode())
    for rel, digest in sorted(files.items()):
        h.update(f"{rel}\n{digest}\n".encode())
    return h.hexdigest()[:24]


def compile_build(
    src_root: Path, config_file: Path, modules: tuple[str, ...], dest: Path
) -> dict[str, object]:
    """Compile ``modules`` (of ``kvbudget.sim``) with mypyc into the new directory ``dest``.

    The sources are copied to a scratch directory and compiled there (never in ``src_root``);
    ``dest`` receives the group library, the shims and the manifest, which is returned.
    Raises :class:`BuildFailed` when mypyc fails or builds less than asked.
    """
    native = load_native(src_root)
    mypy = mypy_version()
    if mypy is None:
        raise BuildFailed("mypy (mypyc) is not installed")
    files = import_closure(src_root, modules, native.PACKAGE)
    with tempfile.TemporaryDirectory(prefix="kvbudget-mypyc-") as tmp:
        work = Path(tmp) / "src"
        for rel in files:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src_root / rel, work / rel)
        digests = {str(rel): native.file_digest(work / rel) for rel in files}
        shutil.copy2(config_file, Path(tmp) / "pyproject.toml")
        sources = [str(native.module_path(Path("."), m)) for m in modules]
        cmd = [sys.executable, "-m", "mypyc", "--config-file", "../pyproject.toml", *sources]
        env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-20000:] + proc.stderr[-20000:])
            raise BuildFailed(f"mypyc failed (exit {proc.returncode}): {' '.join(cmd)}")
        suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
        libs = sorted(work.glob(f"*__mypyc{suffix}"))
        shims = [work / native.module_path(Path("."), m).with_suffix(suffix) for m in modules]
        missing = [str(s) for s in shims if not s.is_file()]
        if len(libs) != 1 or missing:
            raise BuildFailed(f"mypyc built no group library or no module for {missing}")
        dest.mkdir(parents=True)
        for so in [*libs, *shims]:
            shutil.copy2(so, dest / so.name)
        manifest: dict[str, object] = {
            "layout": native.LAYOUT,
            "modules": list(modules),
            "abi": native.abi_tag(),
            "mypyc_version": mypy,
            "group_lib": libs[0].name,
            "shims": [s.name for s in shims],
            "files": digests,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (dest / native.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        return manifest


@contextmanager
def locked(root: Path) -> Iterator[None]:
    import fcntl  # POSIX only: imported here so that a wheel build elsewhere needs no lock

    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def prune(root: Path, keep: Path) -> None:
    keys = sorted(
        (p for p in root.iterdir() if p.is_dir() and p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in keys[KEEP_KEYS - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def build_in_cache(
    src_root: Path, config_file: Path, modules: tuple[str, ...] | None = None
) -> tuple[Path, bool]:
    """The user-cache build for these sources, compiled unless one is there: (dir, built now)."""
    native = load_native(src_root)
    modules = native.COMPILED if modules is None else modules
    mypy = mypy_version()
    if mypy is None:
        raise BuildFailed("mypy (mypyc) is not installed")
    root = native.cache_root()
    key_dir = root / native.source_key(src_root, modules)
    done = key_dir / build_id(native, closure_digests(src_root, modules), mypy)
    if (done / native.MANIFEST).is_file():  # nothing to build: no need to wait on the lock
        return done, False
    with locked(root):
        if (done / native.MANIFEST).is_file():  # built by another process meanwhile
            return done, False
        key_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=key_dir))
        staging.rmdir()
        try:
            manifest = compile_build(src_root, config_file, modules, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        digests = manifest["files"]
        assert isinstance(digests, dict)
        target = key_dir / build_id(native, digests, mypy)
        if (target / native.MANIFEST).is_file():
            shutil.rmtree(staging, ignore_errors=True)
        else:
            staging.rename(target)
        os.utime(key_dir)
        prune(root, key_dir)
    return target, True
