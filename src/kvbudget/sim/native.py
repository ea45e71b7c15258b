"""The simulator's optional mypyc-compiled build: found, checked against the sources, or not used.

The build backend (``setup.py``, ``build_support/mypyc_build.py``) compiles :data:`COMPILED` with
mypyc when the host has a C compiler, into one of two places:

- a wheel (``pip install .``): inside the package, ``kvbudget/sim/_mypyc/`` (:data:`SHIPPED`);
- an editable install (``pip install -e .``) and ``scripts/build_mypyc.py`` (``make install-test``):
  the user cache, ``~/.cache/kvbudget/mypyc/<key>/<build>/``, never the source tree. ``<key>``
  hashes the compiled modules' sources and the Python ABI; ``<build>`` adds every kvbudget
  source file mypyc read (the compiled modules' import closure) and mypy's version.

``manifest.json`` in each build lists those files with their SHA-256. At import,
:func:`activate` (called by ``kvbudget/sim/__init__.py``) uses a build only when every file in
its manifest still hashes the same, the package's own build first: an edited source, another
Python or a missing build gives the pure-Python modules, silently correct.
``KVBUDGET_PURE_PYTHON=1`` forces them. :func:`build_label` says which build ran;
``kvbudget sim --json`` records it.

This module is plain Python (stdlib only): it is never compiled itself.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import sysconfig
from pathlib import Path

#: the simulator's hot modules, compiled together (one mypyc group); chosen by measurement
#: (docs/simulator.md, "Compiled build (mypyc)"; docs/benchmarks.md for its speed)
COMPILED: tuple[str, ...] = (
    # block pool, prefix hashing and the per-request state
    "blockpool",
    "kvcache",
    "prefix",
    "request",
    # the engine: scheduler, explicit core and the lazy-decode fast path
    "scheduler",
    "engine",
    "fastpath",
    "fastpath_events",
    "fastpath_modes",
    "fastpath_step",
    "stepped",
    "replica",
    # the one driver, its events, routing and the streamed run's accumulators
    "events",
    "lifecycle",
    "drive_types",
    "drive_events",
    "drive_route",
    "drive_loop",
    "driver",
    "slots_replica",
    "router",
    "request_result",
    "results",
    "cluster_run",
    "cluster",
    "lockstep",
    # the roofline step price (kvbudget.sim.timing stays interpreted: pydantic) and the
    # measured model's step key and price cache (aiconfigurator-core is called, not compiled)
    "roofline",
    "measured",
)
PACKAGE = "kvbudget.sim"
PURE_ENV = "KVBUDGET_PURE_PYTHON"
MANIFEST = "manifest.json"
#: bumped when the layout of a build directory changes
LAYOUT = "1"
#: where a wheel carries its build, beside this module (a directory, not a package)
SHIPPED = "_mypyc"

_SRC_ROOT = Path(__file__).resolve().parents[2]  # the directory holding kvbudget/
_state: dict[str, str] = {"status": "pure Python (not activated)"}


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/kvbudget/mypyc`` (``~/.cache/kvbudget/mypyc`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvbudget" / "mypyc"


def abi_tag() -> str:
    """The interpreter a compiled module is bound to: version, build and extension suffix."""
    return f"{sys.implementation.cache_tag}{sysconfig.get_config_var('EXT_SUFFIX')}:{sys.version}"


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def module_path(src_root: Path, module: str) -> Path:
    return src_root / Path(*PACKAGE.split(".")) / f"{module}.py"


def source_key(src_root: Path = _SRC_ROOT, modules: tuple[str, ...] = COMPILED) -> str:
    """The first level of the cache: the compiled modules' sources, their list and the ABI."""
    h = hashlib.sha256(f"{LAYOUT}\n{abi_tag()}\n".encode())
    for m in modules:
        h.update(f"{m}\n{file_digest(module_path(src_root, m))}\n".encode())
    return h.hexdigest()[:24]


def _abi_matches(built: str, *, exact: bool) -> bool:
    """The build's interpreter is this one: the whole tag (the cache), or only the extension
    suffix (a wheel: its tag already chose the interpreter, any patch release of it)."""
    if exact:
        return built == abi_tag()
    return built.split(":", 1)[0] == abi_tag().split(":", 1)[0]


def _valid(
    build: Path, src_root: Path, modules: tuple[str, ...], *, exact_abi: bool = True
) -> dict[str, object] | None:
    """The build's manifest when it is complete and every file it read still hashes the same."""
    try:
        manifest = json.loads((build / MANIFEST).read_text())
        if tuple(manifest["modules"]) != modules:
            return None
        if not _abi_matches(str(manifest["abi"]), exact=exact_abi):
            return None
        for rel, digest in manifest["files"].items():
            if file_digest(src_root / rel) != digest:
                return None
        lib = build / manifest["group_lib"]
        if not lib.is_file() or not all((build / so).is_file() for so in manifest["shims"]):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return dict(manifest)


def shipped_build(
    src_root: Path = _SRC_ROOT, modules: tuple[str, ...] = COMPILED
) -> tuple[Path, dict[str, object]] | None:
    """The build an installed wheel carries (``kvbudget/sim/_mypyc``), when it matches."""
    build = module_path(src_root, "native").parent / SHIPPED
    manifest = _valid(build, src_root, modules, exact_abi=False)
    return None if manifest is None else (build, manifest)


def find_build(
    src_root: Path = _SRC_ROOT, modules: tuple[str, ...] = COMPILED
) -> tuple[Path, dict[str, object]] | None:
    """A compiled build that matches the current sources, or ``None``: the package's own
    build first, then the user cache's."""
    shipped = shipped_build(src_root, modules)
    if shipped is not None:
        return shipped
    try:
        key_dir = cache_root() / source_key(src_root, modules)
        candidates = sorted(p for p in key_dir.iterdir() if p.is_dir())
    except (OSError, RuntimeError):  # no cache directory, or no home directory to find it
        return None
    for build in candidates:
        manifest = _valid(build, src_root, modules)
        if manifest is not None:
            return build, manifest
    return None


def activate(package_path: list[str]) -> None:
    """Put a matching compiled build first on the simulator package's ``__path__``.

    Does nothing when ``KVBUDGET_PURE_PYTHON`` is set, when no build matches the sources, or
    when a compiled module was imported already (then nothing is half-switched).
    """
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        _state["status"] = f"pure Python ({PURE_ENV} set)"
        return
    found = find_build()
    if found is None:
        _state["status"] = "pure Python (no mypyc build matches these sources)"
        return
    build, manifest = found
    lib_name = str(manifest["group_lib"]).split(".", 1)[0]
    if any(f"{PACKAGE}.{m}" in sys.modules for m in COMPILED):
        _state["status"] = "pure Python (simulator modules imported before the build was found)"
        return
    if lib_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(lib_name, build / str(manifest["group_lib"]))
        if spec is None or spec.loader is None:
            _state["status"] = "pure Python (mypyc group library not loadable)"
            return
        lib = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(lib)
        except ImportError as exc:
            _state["status"] = f"pure Python (mypyc group library: {exc})"
            return
        sys.modules[lib_name] = lib
    package_path.insert(0, str(build))
    _state["status"] = "ok"
    _state["mypyc"] = str(manifest["mypyc_version"])
    _state["dir"] = str(build)
    _state["origin"] = "built into the package" if build.name == SHIPPED else "from the user cache"


def compiled_modules() -> list[str]:
    """The simulator modules imported from the compiled build (full names)."""
    build_dir = _state.get("dir")
    if build_dir is None:
        return []
    names = [f"{PACKAGE}.{m}" for m in COMPILED]
    return [
        n
        for n in names
        if n in sys.modules and str(getattr(sys.modules[n], "__file__", "")).startswith(build_dir)
    ]


def build_label() -> str:
    """Which build of the simulator ran: ``compiled with mypyc X.Y (N of M modules: ...; built
    into the package)`` (a wheel's) or ``...; from the user cache)``, or ``pure Python (why)``."""
    if _state["status"] != "ok":
        return _state["status"]
    done = compiled_modules()
    if not done:
        return "pure Python (no compiled module in use)"
    names = ", ".join(n.rsplit(".", 1)[1] for n in done)
    total = len(COMPILED)
    where = _state["origin"]
    return (
        f"compiled with mypyc {_state['mypyc']} ({len(done)} of {total} modules: {names}; {where})"
    )
