"""The compiled simulator users get: ``pip wheel`` compiles it with mypyc into the wheel.

From this checkout's files the build backend (``build_support/kvbudget_backend.py``) makes an
sdist; ``pip wheel`` builds a wheel from that sdist (``KVBUDGET_MYPYC=1``: compile or fail, so a
host without a C compiler fails here instead of skipping). The wheel must be tagged for this
interpreter and carry the group library, one extension module per compiled module and the
manifest in ``kvbudget/sim/_mypyc/``; installed (``pip install --target``), the package must
run ``kvbudget sim`` on that build (an empty user cache, so only the wheel's build can be it)
and on pure Python with ``KVBUDGET_PURE_PYTHON=1``, with the same simulated figures.

One mypyc compile: minutes on a two-core host (marked slow; its own timeout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from kvbudget.sim import native

REPO = Path(__file__).resolve().parents[3]
#: what an sdist is made from (the rest of the checkout is not part of the package)
PROJECT_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
PROJECT_DIRS = ("build_support", "src")
# the measured timing model, so every compiled module is imported (N of N in use)
SIM_ARGS = [
    "sim", "--requests", "30", "--rate", "5", "--input-tokens", "256", "--output-tokens", "16",
    "--shared-prefix-tokens", "128", "--timing-model", "measured", "--json",
]  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _copy_project(dest: Path) -> Path:
    dest.mkdir()
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, dest / name)
    junk = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", native.SHIPPED)
    for name in PROJECT_DIRS:
        shutil.copytree(REPO / name, dest / name, ignore=junk)
    return dest


def test_pip_wheel_compiles_the_simulator_into_the_wheel_and_the_install_runs_it(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    env.update(KVBUDGET_MYPYC="1", XDG_CACHE_HOME=str(tmp_path / "empty-cache"))
    env.pop("PYTHONPATH", None)
    project = _copy_project(tmp_path / "project")

    # the sdist, by the build backend itself (what an index would serve)
    backend = (
        "import sys; sys.path.insert(0, 'build_support'); import kvbudget_backend as b; "
        f"print(b.build_sdist({str(tmp_path / 'sdist')!r}))"
    )
    name = _run([sys.executable, "-c", backend], cwd=project, env=env).strip().splitlines()[-1]
    with tarfile.open(tmp_path / "sdist" / name) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    unpacked = tmp_path / "unpacked" / name.removesuffix(".tar.gz")
    assert (unpacked / "build_support" / "mypyc_build.py").is_file()  # the sdist builds alone

    # the wheel, from the sdist; the venv's pinned mypy (no download: no build isolation)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(unpacked)],
        cwd=tmp_path,
        env=env,
    )
    (wheel,) = wheels.glob("kvbudget-*.whl")
    interpreter = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert f"-{interpreter}-{interpreter}-" in wheel.name, wheel.name  # not py3-none-any

    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        manifest = json.loads(zf.read(f"kvbudget/sim/{native.SHIPPED}/{native.MANIFEST}"))
        wheel_meta = zf.read("kvbudget-0.1.0.dist-info/WHEEL").decode()
    shipped = {
        n.rsplit("/", 1)[1] for n in names if n.startswith(f"kvbudget/sim/{native.SHIPPED}/")
    }
    assert shipped >= {f"{m}{suffix}" for m in native.COMPILED} | {native.MANIFEST}
    assert manifest["group_lib"] in shipped and manifest["group_lib"].endswith(f"__mypyc{suffix}")
    assert tuple(manifest["modules"]) == native.COMPILED
    assert "Root-Is-Purelib: false" in wheel_meta
    assert "kvbudget/sim/blockpool.py" in names  # pure Python stays in the wheel beside it

    # installed: the wheel's build runs (the user cache is empty), and pure Python on demand
    site = tmp_path / "site"
    install = [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)]
    _run(install, cwd=tmp_path, env=env)
    run_env = {**env, "PYTHONPATH": str(site)}
    probe = "import kvbudget.sim.blockpool as b; print(b.__file__)"
    where = _run([sys.executable, "-c", probe], cwd=tmp_path, env=run_env).strip()
    assert where == str(site / "kvbudget" / "sim" / native.SHIPPED / f"blockpool{suffix}")
    kvbudget_sim = [sys.executable, "-m", "kvbudget", *SIM_ARGS]
    compiled = json.loads(_run(kvbudget_sim, cwd=tmp_path, env=run_env))
    n = len(native.COMPILED)
    # the label counts the compiled modules the run imported: a vLLM run does not import the
    # llama.cpp slot engine (slots_replica)
    label = compiled["simulator_build"]
    assert label.startswith(
        f"compiled with mypyc {manifest['mypyc_version']} ({n - 1} of {n} modules: "
    ), label
    assert "slots_replica" not in label
    assert compiled["simulator_build"].endswith("; built into the package)")
    # neither the build nor the run used a cached build (the measured model's aic-configs may be
    # written there: they are its model configs, not simulator code)
    assert not (tmp_path / "empty-cache" / "kvbudget" / "mypyc").exists()

    pure_env = {**run_env, native.PURE_ENV: "1"}
    pure = json.loads(_run(kvbudget_sim, cwd=tmp_path, env=pure_env))
    assert pure["simulator_build"] == f"pure Python ({native.PURE_ENV} set)"
    differs = {"wall_s", "simulator_build"}
    assert {k: v for k, v in compiled.items() if k not in differs} == {
        k: v for k, v in pure.items() if k not in differs
    }
