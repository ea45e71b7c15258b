"""The one module that imports NVIDIA's aiconfigurator-core (optional extra ``gpu-data``).

It compiles a model into aiconfigurator-core's Rust estimator (``EngineHandle.compile``: the
model's op graph walked once, priced by the per-GPU kernel tables shipped in the wheel) and says
whether the case is covered: the GPU has vLLM tables, the model compiles, and a probe step of
each kind is priced from silicon data (``AicEngine.last_provenance()`` is ``None`` or
``silicon``). Anything else is a one-line reason, and the caller falls back to the roofline.

Pinned: aiconfigurator-core 0.12.0 (Apache-2.0). Its vLLM tables are for the version its
``systems/query_versions.yaml`` names ``current`` for the GPU (0.24.0 for H100/H200/B200 in
0.12.0); :func:`compile_measured` names that version in the timing model's label.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from kvbudget.sim.measured import MeasuredTiming, StepArgs

AIC_PACKAGE = "aiconfigurator-core"
AIC_VERSION = "0.12.0"
INSTALL_HINT = "pip install 'kvbudget[gpu-data]' (installs aiconfigurator-core 0.12.0)"

#: kvbudget GPU catalog id -> aiconfigurator-core system name (its ``systems/*.yaml``)
GPU_SYSTEMS: dict[str, str] = {
    "H100-SXM": "h100_sxm",
    "H100-PCIe": "h100_pcie",
    "H200": "h200_sxm",
    "A100-80GB": "a100_sxm",
    "L40S": "l40s",
    "L4": "l4",
    "RTX-PRO-6000": "rtx_pro_6000_server",
    "B200": "b200_sxm",
    "B300": "b300_sxm",
}

#: vLLM ``--quantization`` names -> aiconfigurator-core (gemm, moe) quant modes
_QUANT_MODES: dict[str, tuple[str, str]] = {
    "fp8": ("fp8", "fp8"),
    "modelopt": ("fp8", "fp8"),
    "modelopt_fp4": ("nvfp4", "nvfp4"),
    "nvfp4": ("nvfp4", "nvfp4"),
    "awq": ("int4_wo", "int4_wo"),
    "gptq": ("int4_wo", "int4_wo"),
}


class MeasuredUnavailable(Exception):
    """The measured model does not cover this case; the message is the one-line reason."""


@dataclass(frozen=True, slots=True)
class MeasuredCase:
    """What to compile: a model, a GPU, the parallel layout and the dtypes (vLLM's names)."""

    model_id: str
    #: the model's config.json as kvbudget resolved it (used when the wheel has no copy)
    config: dict[str, Any]
    gpu: str
    tp: int = 1
    quantization: str | None = None
    kv_dtype: str = "auto"
    engine_version: str | None = None
    #: aiconfigurator-core quant modes given directly (the silicon rows name them)
    gemm_quant_mode: str | None = None
    moe_quant_mode: str | None = None
    moe_tp: int | None = None
    moe_ep: int | None = None
    #: vLLM --data-parallel-size on a MoE model (aiconfigurator-core's attention_dp_size)
    attention_dp: int = 1


def installed_version() -> str | None:
    """aiconfigurator-core's installed version, ``None`` when it is not installed."""
    try:
        return metadata.version(AIC_PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def _quiet() -> None:
    # its perf-database loader logs each fallback table it opens at WARNING
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)


def system_for(gpu: str) -> str:
    """The aiconfigurator-core system of a catalog GPU, or :class:`MeasuredUnavailable`."""
    system = GPU_SYSTEMS.get(gpu)
    if system is None:
        raise MeasuredUnavailable(
            f"GPU {gpu}: aiconfigurator-core {AIC_VERSION} has no measured vLLM tables for it "
            f"(covered: {', '.join(GPU_SYSTEMS)})"
        )
    return system


def table_version(system: str, cache: Path) -> str:
    """The vLLM version of the tables aiconfigurator-core uses for ``system``. Its loader parses
    every system's yaml (over a second), and the answer depends only on the pinned wheel's
    files, so it is kept in ``cache/specs/aic-<version>/tables-<system>.txt``."""
    kept = cache / "specs" / f"aic-{AIC_VERSION}" / f"tables-{system}.txt"
    if kept.is_file():
        return kept.read_text(encoding="utf-8").strip()
    from aiconfigurator_core.sdk import perf_database

    try:
        found = str(perf_database.resolve_query_version(system, "vllm", "current"))
    except Exception as exc:  # its loader raises ValueError/KeyError/OSError variously
        raise MeasuredUnavailable(
            f"GPU {system}: aiconfigurator-core {AIC_VERSION} has no vLLM tables ({_first(exc)})"
        ) from None
    _write_atomically(kept, found.encode())
    return found


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _bundled_config(model_id: str) -> Path:
    """Where the wheel keeps its own copy of ``model_id``'s config.json (it may not have one)."""
    from importlib import resources

    configs = Path(str(resources.files("aiconfigurator_core"))) / "model_configs"
    return configs / (model_id.replace("/", "--") + "_config.json")


def _model_path(case: MeasuredCase, cache_dir: Path) -> str:
    """The wheel's own copy of the config when it has one, else kvbudget's in a directory."""
    if _bundled_config(case.model_id).is_file():
        return case.model_id
    text = json.dumps(case.config, sort_keys=True)
    folder = cache_dir / hashlib.sha256(text.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(text, encoding="utf-8")
    return str(folder)


def _quant_modes(case: MeasuredCase) -> tuple[str | None, str | None]:
    if case.gemm_quant_mode or case.moe_quant_mode:
        return case.gemm_quant_mode, case.moe_quant_mode
    if case.quantization is None:
        return None, None  # aiconfigurator-core reads the config's quantization_config
    modes = _QUANT_MODES.get(case.quantization.lower())
    if modes is None:
        raise MeasuredUnavailable(
            f"quantization {case.quantization}: no aiconfigurator-core GEMM mode mapped for it "
            f"(mapped: {', '.join(_QUANT_MODES)})"
        )
    return modes


#: compiled estimators and their step prices, one per model/GPU/layout/dtypes (per process)
_HANDLES: dict[tuple[object, ...], tuple[KeptEstimator, dict[StepArgs, float]]] = {}

#: bumped when the layout of a kept answers file changes
ANSWERS_LAYOUT = 1
_Decode = tuple[int, int, int]
_Mixed = tuple[int, int, int, int, int]
_Breakdown = tuple[float, float, float, float]


class KeptEstimator:
    """aiconfigurator-core's compiled estimator with its answers kept beside its spec.

    The answers of the two calls :class:`~kvbudget.sim.measured.MeasuredTiming` makes
    (``decode_step_latency`` and ``mixed_step_breakdown``, milliseconds) depend only on the
    compiled spec (the pinned wheel, the model's config, the GPU and the compile arguments: its
    file name hashes them) and the call's integer arguments, so they are kept in
    ``<spec>.answers.json`` (floats written with ``repr``: read back bit for bit) and a later
    run of the same case asks the estimator only what no earlier run asked. The estimator is
    built from the spec on the first question not answered there: its first calls load the
    GPU's kernel tables (most of a second), which a run whose every step shape was priced
    before never pays. New answers are merged into the file when the process exits.

    Any other attribute (``decode_step_per_op``, ``spec_bytes``, ...) is the estimator's own.
    """

    def __init__(self, load: Callable[[], Any], answers: Path, *, handle: Any = None) -> None:
        self._load = load
        self._handle = handle
        self.answers_path = answers
        self._decode: dict[_Decode, float] = {}
        self._mixed: dict[_Mixed, _Breakdown] = {}
        self._num_new = 0
        self._read(answers)

    @property
    def handle(self) -> Any:
        """The compiled estimator (``EngineHandle``), built on first use."""
        if self._handle is None:
            self._handle = self._load()
        return self._handle

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not built yet, or pickling: no delegation
            raise AttributeError(name)
        return getattr(self.handle, name)

    def decode_step_latency(self, gen_tokens: int, isl: int, osl: int) -> float:
        key = (gen_tokens, isl, osl)
        got = self._decode.get(key)
        if got is None:
            got = self._decode[key] = float(self.handle.decode_step_latency(*key))
            self._added()
        return got

    def mixed_step_breakdown(
        self, ctx_tokens: int, gen_tokens: int, isl: int, osl: int, prefix: int = 0
    ) -> _Breakdown:
        key = (ctx_tokens, gen_tokens, isl, osl, prefix)
        got = self._mixed.get(key)
        if got is None:
            a, b, c, d = self.handle.mixed_step_breakdown(*key)
            got = self._mixed[key] = (float(a), float(b), float(c), float(d))
            self._added()
        return got

    def _added(self) -> None:
        if self._num_new == 0:
            atexit.register(self.save)
        self._num_new += 1

    def _read(self, path: Path) -> None:
        """Add the answers kept in ``path`` (a missing, partial or foreign file adds none)."""
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
            if kept.get("layout") != ANSWERS_LAYOUT or kept.get("aic") != AIC_VERSION:
                return
            decode = {(int(g), int(i), int(o)): float(ms) for g, i, o, ms in kept["decode"]}
            mixed = {
                (int(c), int(g), int(i), int(o), int(p)): (float(a), float(b), float(x), float(d))
                for c, g, i, o, p, a, b, x, d in kept["mixed"]
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return
        for k, v in decode.items():
            self._decode.setdefault(k, v)
        for km, vm in mixed.items():
            self._mixed.setdefault(km, vm)

    def save(self) -> None:
        """Merge this process's new answers into the kept file (atomically: runs race)."""
        if self._num_new == 0:
            return
        self._read(self.answers_path)  # what other runs kept since this one started
        doc = {
            "layout": ANSWERS_LAYOUT,
            "aic": AIC_VERSION,
            "decode": [[*k, v] for k, v in sorted(self._decode.items())],
            "mixed": [[*k, *v] for k, v in sorted(self._mixed.items())],
        }
        try:
            _write_atomically(self.answers_path, json.dumps(doc).encode())
        except OSError:
            return  # a read-only cache only costs the next run the estimator's calls
        self._num_new = 0


def compile_measured(case: MeasuredCase, cache_dir: Path) -> MeasuredTiming:
    """The measured timing of ``case`` (compiled once per process), or
    :class:`MeasuredUnavailable` with the reason (not installed, GPU, model, op not covered)."""
    version = installed_version()
    if version is None:
        raise MeasuredUnavailable(f"aiconfigurator-core is not installed; {INSTALL_HINT}")
    if version != AIC_VERSION:
        raise MeasuredUnavailable(
            f"aiconfigurator-core {version} is installed, kvbudget is pinned to {AIC_VERSION}; "
            f"{INSTALL_HINT}"
        )
    _quiet()
    system = system_for(case.gpu)
    tables = table_version(system, cache_dir)
    gemm, moe = _quant_modes(case)
    kv = "fp8" if case.kv_dtype.lower().startswith("fp8") else None
    key = (
        case.model_id,
        system,
        case.tp,
        gemm,
        moe,
        kv,
        case.moe_tp,
        case.moe_ep,
        case.attention_dp,
    )
    if key not in _HANDLES:
        _HANDLES[key] = (_kept_estimator(case, system, gemm, moe, kv, cache_dir), {})
    handle, prices = _HANDLES[key]
    label = f"measured (aiconfigurator-core {AIC_VERSION}, {system}, vllm {tables} tables"
    if case.attention_dp > 1:
        label += f"; data parallel {case.attention_dp}"
    if case.moe_ep is not None and case.moe_ep > 1:
        label += f"; expert parallel {case.moe_ep}"
    if case.engine_version and case.engine_version != tables:
        label += f"; engine vllm {case.engine_version}"
    return MeasuredTiming(handle, name=label + ")", cache=prices)


def _kept_estimator(
    case: MeasuredCase, system: str, gemm: str | None, moe: str | None, kv: str | None, cache: Path
) -> KeptEstimator:
    """The estimator of ``case`` with its kept answers (:class:`KeptEstimator`): built from the
    kept spec only when a question is not answered there; compiled (and probed) now when no
    spec is kept, so a case not covered is still refused here."""
    model_path = _model_path(case, cache)
    spec_file = _spec_file(cache, model_path, system, _compile_kwargs(case, gemm, moe, kv))
    answers = spec_file.with_name(spec_file.stem + ".answers.json")
    if spec_file.is_file():
        return KeptEstimator(lambda: _compile(case, system, gemm, moe, kv, cache), answers)
    return KeptEstimator(lambda: None, answers, handle=_compile(case, system, gemm, moe, kv, cache))


def _compile_kwargs(
    case: MeasuredCase, gemm: str | None, moe: str | None, kv: str | None
) -> dict[str, Any]:
    """``EngineHandle.compile``'s keyword arguments for ``case`` (they name the kept spec)."""
    kwargs: dict[str, Any] = {
        "tp_size": case.tp,
        "moe_tp_size": case.moe_tp if case.moe_tp is not None else case.tp,
        "moe_ep_size": case.moe_ep if case.moe_ep is not None else 1,
        "gemm_quant_mode": gemm,
        "moe_quant_mode": moe,
        "kvcache_quant_mode": kv,
    }
    if case.attention_dp > 1:  # absent otherwise: the kept specs' names stay as they were
        kwargs["attention_dp_size"] = case.attention_dp
    return kwargs


def _compile(
    case: MeasuredCase, system: str, gemm: str | None, moe: str | None, kv: str | None, cache: Path
) -> Any:
    """The compiled estimator, from the spec cache when this exact compile was done before.

    ``EngineHandle.compile`` walks the model's op graph and resolves its attention lanes against
    the tables (about 2 s); its output, the ``EngineSpec`` bytes, depends only on the pinned
    wheel, the model's config and the compile arguments, so it is kept under ``cache/specs``
    named by their hash and later runs build the handle from it (``EngineHandle(spec_bytes)``,
    the wheel's own constructor). Only a spec whose probe passed is kept.
    """
    from aiconfigurator_core.sdk.engine import EngineHandle

    model_path = _model_path(case, cache)
    kwargs = _compile_kwargs(case, gemm, moe, kv)
    spec_file = _spec_file(cache, model_path, system, kwargs)
    if spec_file.is_file():
        try:
            return EngineHandle(spec_file.read_bytes())
        except Exception:  # a truncated or foreign spec file: compile again and replace it
            pass
    try:
        handle = EngineHandle.compile(model_path, system, "vllm", **kwargs)
    except Exception as exc:  # compile raises ValueError/KeyError/its own errors
        raise MeasuredUnavailable(
            f"model {case.model_id}: aiconfigurator-core {AIC_VERSION} cannot compile it on "
            f"{system} tp {case.tp} ({_first(exc)})"
        ) from None
    _probe(handle, case, system)
    _write_atomically(spec_file, handle.spec_bytes)
    return handle


def _spec_file(cache: Path, model_path: str, system: str, kwargs: dict[str, Any]) -> Path:
    """Where the compiled spec of this exact compile is kept: named by the hash of the pinned
    version, the config's bytes (the wheel's copy, or kvbudget's), the GPU and the arguments."""
    config = Path(model_path) / "config.json"
    if not config.is_file():  # a model id: the wheel's own copy
        config = _bundled_config(model_path)
    key = json.dumps(
        [AIC_VERSION, hashlib.sha256(config.read_bytes()).hexdigest(), system, "vllm", kwargs],
        sort_keys=True,
    )
    name = hashlib.sha256(key.encode()).hexdigest()[:32]
    return cache / "specs" / f"aic-{AIC_VERSION}" / f"{name}.spec"


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` so that a reader sees the whole file or none (concurrent runs race)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _probe(handle: Any, case: MeasuredCase, system: str) -> None:
    """Price one mixed and one decode step; any op priced off silicon data is a reason."""
    for label, call in (
        ("mixed step", lambda: handle.mixed_step_breakdown_per_op(1024, 16, 1024, 1, 0)),
        ("decode step", lambda: [handle.decode_step_per_op(16, 1024, 1)]),
    ):
        try:
            groups = call()
            tier = handle.last_provenance()
        except Exception as exc:
            raise MeasuredUnavailable(
                f"model {case.model_id} on {system}: a {label} cannot be priced from "
                f"aiconfigurator-core's tables ({_first(exc)})"
            ) from None
        if tier not in (None, "silicon"):
            off = sorted(
                {
                    name
                    for group in groups
                    for name, _lat, _energy, source in group
                    if source not in ("silicon", "mixed")
                }
            )
            raise MeasuredUnavailable(
                f"model {case.model_id} on {system}: {', '.join(off) or 'an op'} has no measured "
                f"data (priced {tier}) in a {label}"
            )
