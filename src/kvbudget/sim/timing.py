"""Step-time models: how long one engine step takes, given what it computes.

The two step-time models defined here (the measured-kernel model lives in ``sim/measured.py``; all
three are registered by name in ``sim/timing_select.py``); every simulated figure is labelled with
the model's ``name``.

``roofline`` (:class:`RooflineTiming`), from the GPU catalog and the model structure:

* FLOPs = ``2 * active_params * tokens`` (all tokens of the step, prefill and decode) plus the
  attention term ``4 * layers * q_heads * head_dim * pairs``, where ``pairs`` counts
  (query, key) pairs: ``n * (c + (n + 1) / 2)`` for a prefill chunk of ``n`` tokens after ``c``
  computed ones, and ``c + 1`` for a decode token at context ``c``;
* bytes = weights (read once per step) + KV read (``kv_bytes_per_token * context``) + KV written;
  a MoE model's routed experts count only where the step's tokens chose them: of ``E`` experts
  with ``k`` per token, ``T`` tokens touch ``E * (1 - (1 - k/E)^T)`` on average (uniform routing),
  so the step reads ``dense_bytes + expert_bytes * (1 - (1 - k/E)^T)``; ``active_params`` counts
  ``k/E`` of the routed experts' parameters;
* per rank: FLOPs, weights and KV divided by the tensor-parallel size ``tp``;
* GEMM FLOPs at the peak of the dtype they run in (fp8 weights with fp8 activations: the GPU's
  fp8 peak where it has one; weight-only 4-bit methods dequantize to bf16; the modules a
  ModelOpt checkpoint's ``exclude_modules`` leaves unquantized at bf16), attention at bf16;
* ``time = max(flops / (peak * compute_efficiency), bytes / (bandwidth * bandwidth_efficiency))
  + tp_allreduce + step_overhead_s``; the all-reduce cost is two ring all-reduces per layer of
  ``tokens * hidden * 2`` bytes: ``2 * (tp - 1) / tp * bytes / link_bandwidth + latency``.

``calibrated`` (:class:`CalibratedTiming`), fitted to measured points stored in a JSON profile
(:class:`CalibrationProfile`): prefill ``t = a0 + a1*T + a2*T^2`` and decode
``t = b0 + b1*batch + b2*context`` by non-negative least squares (``scipy.optimize.nnls``); a
mixed step costs ``max(a0, b0) + a1*P + 2*a2*pairs + b1*n + b2*ctx``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvbudget.errors import ConfigError
from kvbudget.sim.roofline import BatchShape as BatchShape
from kvbudget.sim.roofline import RooflineCost


class StepTimeModel(Protocol):
    """Anything that prices a step."""

    name: str

    def step_time_s(self, shape: BatchShape) -> float: ...

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float: ...

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float: ...


@dataclass(frozen=True, slots=True)
class ModelCost:
    """The model figures the roofline needs (from ``ModelSpec`` or a ``PlanResult``)."""

    model_id: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    head_dim: int
    #: parameters touched per token (all of them for dense models; active ones for MoE)
    num_active_params: float
    weights_bytes: float
    #: KV bytes of one token over all layers, whole model (not per rank)
    kv_bytes_per_token: float
    activation_bytes: int = 2
    #: bytes of the routed experts (part of ``weights_bytes``; 0 for a dense model)
    expert_weights_bytes: float = 0.0
    #: routed experts per MoE layer and how many each token uses (0 for a dense model)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    #: active parameters (part of ``num_active_params``) whose GEMMs run in bf16 although the
    #: checkpoint is quantized: the modules its ``exclude_modules`` leaves unquantized
    num_bf16_gemm_params: float = 0.0


@dataclass(frozen=True, slots=True)
class GpuPerf:
    """The GPU figures the roofline needs (from the GPU catalog)."""

    name: str
    memory_bytes: float
    bandwidth_bytes_per_s: float
    peak_flops: float
    link_bytes_per_s: float = 0.0
    #: the GEMMs' peak when they run in another dtype than bf16 (fp8 weights and activations);
    #: 0: ``peak_flops``
    gemm_peak_flops: float = 0.0
    #: that dtype, for the timing model's name ("" for bf16)
    gemm_dtype: str = ""


class RooflineParams(BaseModel):
    """Efficiency factors and fixed costs of the roofline model (documented defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute_efficiency: float = Field(default=0.55, gt=0, le=1)
    bandwidth_efficiency: float = Field(default=0.80, gt=0, le=1)
    step_overhead_s: float = Field(default=0.002, ge=0)
    allreduce_latency_s: float = Field(default=8e-6, ge=0)
    #: used when the GPU has no link bandwidth in the catalog (PCIe-class, bytes/s)
    default_link_bytes_per_s: float = Field(default=50e9, gt=0)


class RooflineTiming:
    """Roofline step time for one replica (``tp`` GPUs)."""

    def __init__(
        self, model: ModelCost, gpu: GpuPerf, *, tp: int = 1, params: RooflineParams | None = None
    ) -> None:
        if tp < 1:
            raise ConfigError(f"tp: must be >= 1, got {tp}", field="tp")
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.params = params or RooflineParams()
        self.name = f"roofline ({gpu.gemm_dtype} GEMMs)" if gpu.gemm_peak_flops else "roofline"
        p = self.params
        link = gpu.link_bytes_per_s or p.default_link_bytes_per_s
        routed = bool(model.expert_weights_bytes and model.num_experts)
        expert_bytes = model.expert_weights_bytes if routed else 0.0
        # GEMMs in a low dtype: the excluded modules' share stays at the bf16 peak
        bf16_params = model.num_bf16_gemm_params if gpu.gemm_peak_flops else 0.0
        self._cost = RooflineCost(
            flops_per_token=2.0 * (model.num_active_params - bf16_params) / tp,
            attn_flops_per_pair=(
                4.0 * model.num_layers * model.num_attention_heads * model.head_dim / tp
            ),
            kv_per_token=model.kv_bytes_per_token / tp,
            weights=(model.weights_bytes - expert_bytes) / tp,
            flops_rate=gpu.peak_flops * p.compute_efficiency,
            byte_rate=gpu.bandwidth_bytes_per_s * p.bandwidth_efficiency,
            ar_per_token=(
                0.0
                if tp == 1
                else 2 * model.num_layers * 2 * (tp - 1) / tp * model.hidden_size * 2 / link
            ),
            ar_fixed=0.0 if tp == 1 else 2 * model.num_layers * p.allreduce_latency_s,
            step_overhead_s=p.step_overhead_s,
            gemm_rate=gpu.gemm_peak_flops * p.compute_efficiency,
            bf16_flops_per_token=2.0 * bf16_params / tp,
            expert_weights=expert_bytes / tp,
            expert_miss=(
                1.0 - min(model.num_experts_per_tok, model.num_experts) / model.num_experts
                if routed
                else 1.0
            ),
        )
        #: the compiled step price (``RooflineCost.step_time_s``), called once per step
        self.step_time_s: Callable[[BatchShape], float] = self._cost.step_time_s

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        """A pure decode step (fast path used when advancing many steps)."""
        return self.step_time_s(decode_shape(num_seqs, context_tokens))

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        """A lone prefill of ``num_tokens`` after ``context_tokens`` cached ones."""
        return self.step_time_s(prefill_shape(num_tokens, context_tokens))


def decode_shape(num_seqs: int, context_tokens: int) -> BatchShape:
    """The batch of a pure decode step: ``num_seqs`` sequences, ``context_tokens`` in all."""
    return BatchShape(num_decode_seqs=num_seqs, decode_context_tokens=context_tokens)


def prefill_shape(num_tokens: int, context_tokens: int = 0) -> BatchShape:
    """The batch of a lone prefill of ``num_tokens`` after ``context_tokens`` cached ones."""
    return BatchShape(
        num_prefill_tokens=num_tokens,
        prefill_pairs=num_tokens * (context_tokens + (num_tokens + 1) / 2),
        prefill_context_tokens=context_tokens + num_tokens,
    )


class StepFit(BaseModel):
    """Fitted step-time coefficients (``kvbudget calibrate``), seconds; all non-negative.

    One step (one ubatch) costs ``step_overhead_s + prefill_per_token_s * P +
    prefill_per_pair_s * pairs + decode_per_seq_s * n + decode_per_context_token_s * ctx``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    step_overhead_s: float = Field(ge=0)
    prefill_per_token_s: float = Field(ge=0)
    prefill_per_pair_s: float = Field(ge=0)
    decode_per_seq_s: float = Field(ge=0)
    decode_per_context_token_s: float = Field(ge=0)


class MeasuredCorrection(BaseModel):
    """Factors that correct the measured model from a real engine's run, with their provenance
    (:mod:`kvbudget.sim.measured_correction`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the measured model's label the factors were derived against
    measured_model: str
    #: the profile whose points they come from, its engine and hardware
    profile: str
    engine: str
    hardware: str
    prefill_factor: float = Field(gt=0)
    decode_factor: float = Field(gt=0)
    num_prefill_points: int = Field(ge=1)
    num_decode_points: int = Field(ge=1)
    #: tokens of one prefill step the cold prompts were priced in
    prefill_step_tokens: int = Field(ge=1)
    #: root-mean-square relative error of the measured model on the points, before and after
    prefill_rms_rel_before: float = Field(ge=0)
    prefill_rms_rel_after: float = Field(ge=0)
    decode_rms_rel_before: float = Field(ge=0)
    decode_rms_rel_after: float = Field(ge=0)
    method: str


class CalibrationProfile(BaseModel):
    """Measured step times of one engine/model/GPU, stored as JSON.

    Profiles written by ``kvbudget calibrate`` also carry the fit itself (``fit``, used as is),
    the engine's version, flags and hardware, the fit's residuals and the ranges the measured
    points covered (``valid_ranges``: name -> [min, max]); all optional for older profiles.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    model_id: str
    gpu: str
    tp: int = Field(default=1, ge=1)
    engine: str = Field(description="engine and version the points were measured on")
    #: (prefill tokens, seconds)
    prefill_points: list[tuple[int, float]] = Field(min_length=3)
    #: (batch size, total context tokens of the batch, seconds)
    decode_points: list[tuple[int, int, float]] = Field(min_length=3)
    fit: StepFit | None = None
    engine_version: str = ""
    engine_flags: list[str] = Field(default_factory=list)
    hardware: str = ""
    #: scheduling knobs read from the engine (llama.cpp: num_slots, n_ctx_slot, n_batch, n_ubatch)
    engine_settings: dict[str, int | float | str | bool] = Field(default_factory=dict)
    #: latency outside engine steps (HTTP, tokenization), added to TTFT by request-level predictors
    request_overhead_s: float = Field(default=0.0, ge=0)
    #: name -> value (e.g. rms_s, max_rel), how well the fit matches the points it came from
    residuals: dict[str, float] = Field(default_factory=dict)
    #: name (prompt_tokens, context_tokens, batch_size) -> (min, max) covered by the points
    valid_ranges: dict[str, tuple[float, float]] = Field(default_factory=dict)
    #: the measured model corrected by these points (``kvbudget calibrate --gpu``); optional
    measured_correction: MeasuredCorrection | None = None

    def range_warnings(self, observed: dict[str, float]) -> list[str]:
        """One line per observed maximum outside ``valid_ranges`` (names not in both skipped)."""
        out: list[str] = []
        for name, value in sorted(observed.items()):
            rng = self.valid_ranges.get(name)
            if rng is not None and not rng[0] <= value <= rng[1]:
                out.append(
                    f"profile {self.name}: {name} {value:g} is outside the calibrated range "
                    f"[{rng[0]:g}, {rng[1]:g}]; the step time is extrapolated (recalibrate "
                    f"with a wider series to trust it)"
                )
        return out

    @classmethod
    def load(cls, path: str | Path) -> CalibrationProfile:
        """Read a profile; bad files raise a one-line ConfigError."""
        try:
            return cls.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError, RecursionError) as exc:  # bad UTF-8 or JSON
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(
                f"timing profile {path}: cannot use it ({first}); see docs/simulator.md "
                "for the format",
                field="timing_profile",
            ) from exc


class CalibratedTiming:
    """Step time fitted (non-negative least squares) to a :class:`CalibrationProfile`."""

    def __init__(self, profile: CalibrationProfile) -> None:
        from scipy.optimize import nnls

        self.profile = profile
        self.name = f"calibrated:{profile.name}"
        self.prefill_coef: tuple[float, float, float]
        self.decode_coef: tuple[float, float, float]
        if profile.fit is not None:  # fitted by kvbudget calibrate: one shared step overhead
            f = profile.fit
            self.prefill_coef = (f.step_overhead_s, f.prefill_per_token_s, f.prefill_per_pair_s / 2)
            self.decode_coef = (
                f.step_overhead_s,
                f.decode_per_seq_s,
                f.decode_per_context_token_s,
            )
            return
        pre = np.array(profile.prefill_points, dtype=float)
        a_matrix = np.column_stack([np.ones(len(pre)), pre[:, 0], pre[:, 0] ** 2])
        self.prefill_coef = tuple(  # type: ignore[assignment]
            float(x) for x in nnls(a_matrix, pre[:, 1])[0]
        )
        dec = np.array(profile.decode_points, dtype=float)
        b_matrix = np.column_stack([np.ones(len(dec)), dec[:, 0], dec[:, 1]])
        self.decode_coef = tuple(  # type: ignore[assignment]
            float(x) for x in nnls(b_matrix, dec[:, 2])[0]
        )

    def step_time_s(self, shape: BatchShape) -> float:
        a0, a1, a2 = self.prefill_coef
        b0, b1, b2 = self.decode_coef
        if shape.num_prefill_tokens == 0 and shape.num_decode_seqs == 0:
            return 0.0
        if shape.num_prefill_tokens == 0:
            return b0 + b1 * shape.num_decode_seqs + b2 * shape.decode_context_tokens
        base = b0 if shape.num_decode_seqs and b0 > a0 else a0
        return (
            base
            + a1 * shape.num_prefill_tokens
            + 2 * a2 * shape.prefill_pairs
            + b1 * shape.num_decode_seqs
            + b2 * shape.decode_context_tokens
        )

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        b0, b1, b2 = self.decode_coef
        return b0 + b1 * num_seqs + b2 * context_tokens

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        return self.step_time_s(
            BatchShape(
                num_prefill_tokens=num_tokens,
                prefill_pairs=num_tokens * (context_tokens + (num_tokens + 1) / 2),
                prefill_context_tokens=context_tokens + num_tokens,
            )
        )


class FixedTiming:
    """Constant-per-token timing for tests and the embedded server's simplest mode."""

    def __init__(
        self, *, step_s: float = 0.01, per_token_s: float = 0.0, name: str = "fixed"
    ) -> None:
        self.step_s = step_s
        self.per_token_s = per_token_s
        self.name = name

    def step_time_s(self, shape: BatchShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        return 0.0 if tokens == 0 else self.step_s + self.per_token_s * tokens

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        return self.step_time_s(BatchShape(num_decode_seqs=num_seqs))

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        return self.step_time_s(BatchShape(num_prefill_tokens=num_tokens))
