"""setuptools hooks: the simulator's hot modules compiled with mypyc when this host can.

Everything else about the package is in ``pyproject.toml``. ``build_py`` compiles
``kvbudget.sim.native.COMPILED`` with mypyc (``build_support/mypyc_build.py``):

- a wheel (``pip install .``, ``pip wheel .``): into the package, ``kvbudget/sim/_mypyc/``, and
  the wheel is tagged for this Python and platform; nothing compiled: a pure-Python wheel;
- an editable install (``pip install -e .``): into the user cache, ``~/.cache/kvbudget/mypyc``,
  where ``kvbudget.sim.native`` finds it while the sources still match.

No C compiler, Python headers or mypy: one line, and the simulator is pure Python. ``KVBUDGET_MYPYC``
(``auto``, ``0``, ``1``) is read by ``build_support/mypyc_build.py``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "build_support"))

import mypyc_build  # noqa: E402


class CompiledDistribution(Distribution):
    """Platform-specific once ``build_py`` compiled the simulator (a wheel's tag, platlib)."""

    kvbudget_compiled = False

    def has_ext_modules(self) -> bool:
        return self.kvbudget_compiled or super().has_ext_modules()


class BuildPy(build_py):
    """Copy the package (setuptools), then compile the simulator's hot modules with mypyc."""

    def run(self) -> None:
        super().run()
        self._compile()

    def _say(self, line: str) -> None:
        print(f"kvbudget: {line}", file=sys.stderr, flush=True)

    def _compile(self) -> None:
        choice = mypyc_build.mode()
        if choice == "off":
            self._say(f"{mypyc_build.MODE_ENV}=0: the simulator is pure Python")
            return
        why = mypyc_build.missing_toolchain()
        if why is not None:
            if choice == "required":
                raise SystemExit(f"{mypyc_build.MODE_ENV}=1 but {why}")
            self._say(f"mypyc build skipped: {why}; the simulator is pure Python")
            return
        src = ROOT / "src"
        config = ROOT / "pyproject.toml"
        try:
            if self.editable_mode:
                where, built = mypyc_build.build_in_cache(src, config)
                self._say(f"mypyc build {'built' if built else 'up to date'} in the cache: {where}")
                return
            modules = tuple(mypyc_build.load_native(src).COMPILED)
            dest = Path(self.build_lib) / "kvbudget" / "sim" / "_mypyc"
            shutil.rmtree(dest, ignore_errors=True)  # a previous build into this build directory
            mypyc_build.compile_build(src, config, modules, dest)
        except mypyc_build.BuildFailed as exc:
            if choice == "required":
                raise SystemExit(f"{mypyc_build.MODE_ENV}=1 and {exc}") from None
            self._say(f"mypyc build failed ({exc}); the simulator is pure Python")
            return
        dist = self.distribution
        assert isinstance(dist, CompiledDistribution)
        dist.kvbudget_compiled = True
        self._say(f"mypyc build: {len(modules)} modules compiled into {dest}")


class BdistWheel(bdist_wheel):
    """Decide pure or platform-specific after the build, when it is known whether mypyc ran."""

    def run(self) -> None:
        if not self.skip_build:
            self.run_command("build_py")
        dist = self.distribution
        assert isinstance(dist, CompiledDistribution)
        self.root_is_pure = not dist.has_ext_modules()
        super().run()


cmdclass: dict[str, Any] = {"build_py": BuildPy, "bdist_wheel": BdistWheel}
setup(distclass=CompiledDistribution, cmdclass=cmdclass)
