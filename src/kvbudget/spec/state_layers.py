"""The ``state`` layer kind: a fixed-size recurrent state per sequence.

One of the layer kinds of :mod:`kvbudget.spec.layers` (and a part of its ``hybrid`` kind): Mamba,
Mamba2, gated delta net, Kimi delta attention, lightning/linear attention and short
convolutions, sized in bytes per sequence whatever the length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

StateKind = Literal["mamba", "mamba2", "gdn", "kda", "linear", "shortconv", "sconv_fp32"]


@dataclass(frozen=True, slots=True)
class StateLayer:
    """A fixed-size recurrent state per sequence (Mamba, Mamba2, gated delta net, linear attention).

    Fields are the model's global (TP=1) sizes:

    * ``mamba``: conv ``(conv_kernel-1, intermediate_size)``, ssm ``(intermediate_size, state_size)``.
    * ``mamba2``: conv ``(conv_kernel-1, intermediate_size + 2*n_groups*state_size)``,
      ssm ``(num_heads, head_dim, state_size)``.
    * ``gdn`` (gated delta net): conv ``(conv_kernel-1, 2*num_k_heads*head_k_dim + num_heads*head_dim)``,
      ssm ``(num_heads, head_dim, head_k_dim)`` where ``num_heads``/``head_dim`` are the V heads.
    * ``kda`` (Kimi Delta Attention, Kimi-Linear): the gdn shapes with K heads = V heads
      (vLLM ``MambaStateShapeCalculator.kda_state_shape``); vLLM keeps its recurrent state in
      float32 unless ``--mamba-ssm-cache-dtype`` says otherwise (``kda_state_dtype``).
    * ``linear`` (lightning / linear attention): no conv, state ``(num_heads, head_dim, head_dim)``.
    * ``shortconv`` (LFM2 short convolution): conv ``(conv_kernel-1, intermediate_size)`` only,
      where ``intermediate_size`` is the hidden size (``conv_L_cache`` is the kernel).
    * ``sconv_fp32`` (Inkling's four short convolutions beside attention): conv
      ``(conv_kernel-1, intermediate_size)`` only, ``intermediate_size`` the channels of all four
      (K and V: ``kv_heads x head_dim`` each; attention and MLP inputs: ``hidden_size`` each),
      kept in float32 whatever the model dtype (``modeling_inkling.py``
      ``_keep_in_fp32_modules``).

    Shapes follow vLLM's ``MambaStateShapeCalculator`` (``mamba_utils.py``); transformers keeps
    a conv window of ``conv_kernel`` (not ``-1``), which its layout accounts for.
    """

    kind: ClassVar[str] = "state"
    layer_index: int
    state_kind: StateKind
    conv_kernel: int = 0
    intermediate_size: int = 0
    state_size: int = 0
    n_groups: int = 0
    num_heads: int = 0
    head_dim: int = 0
    num_k_heads: int = 0
    head_k_dim: int = 0
    #: a second conv state kept beside the layer's own, in the model dtype (Qwen4-Exp's PLE
    #: short convolution on its ``ple_layer_ids`` layers): its channels and the tokens it keeps;
    #: 0 = none
    aux_conv_channels: int = field(default=0, kw_only=True)
    aux_conv_window: int = field(default=0, kw_only=True)

    def aux_conv_elements(self) -> int:
        """Elements of the second conv state (0 without one)."""
        return self.aux_conv_channels * self.aux_conv_window

    def conv_channels(self, tp: int = 1) -> int:
        """Conv-state channels on one rank (mamba2 pads ``n_groups`` up to a multiple of TP)."""
        if self.state_kind in ("mamba", "shortconv", "sconv_fp32"):
            return self.intermediate_size // tp
        if self.state_kind == "mamba2":
            groups = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)
            return (self.intermediate_size + 2 * groups * self.state_size) // tp
        if self.state_kind in ("gdn", "kda"):
            return (2 * self.num_k_heads * self.head_k_dim + self.num_heads * self.head_dim) // tp
        return 0

    def conv_shape(self, tp: int = 1, *, num_speculative_tokens: int = 0) -> tuple[int, ...]:
        """Conv state as vLLM stores it: ``(conv_kernel - 1 + spec, channels / tp)``; () if none."""
        if self.state_kind == "linear" or self.conv_kernel <= 0:
            return ()
        extra = 0 if self.state_kind == "mamba" else num_speculative_tokens
        return (self.conv_kernel - 1 + extra, self.conv_channels(tp))

    def ssm_shape(self, tp: int = 1) -> tuple[int, ...]:
        """Recurrent (temporal) state on one rank."""
        if self.state_kind == "mamba":
            return (self.intermediate_size // tp, self.state_size)
        if self.state_kind == "mamba2":
            return (self.num_heads // tp, self.head_dim, self.state_size)
        if self.state_kind in ("gdn", "kda"):
            return (self.num_heads // tp, self.head_dim, self.head_k_dim)
        if self.state_kind in ("shortconv", "sconv_fp32"):
            return ()
        return (self.num_heads // tp, self.head_dim, self.head_dim)

    def conv_elements(self, tp: int = 1) -> int:
        shape = self.conv_shape(tp)
        return math.prod(shape) if shape else 0

    def ssm_elements(self, tp: int = 1) -> int:
        shape = self.ssm_shape(tp)
        return math.prod(shape) if shape else 0

    def bytes_per_token(self, element_bytes: int) -> int:
        """State layers do not grow with tokens."""
        return 0

    def kept_tokens(self, num_tokens: int) -> int:
        return 0

    def bytes_per_state(self, element_bytes: int, ssm_element_bytes: int | None = None) -> int:
        """Bytes of one sequence's state (TP=1); ``ssm_element_bytes`` defaults to ``element_bytes``."""
        ssm_bytes = element_bytes if ssm_element_bytes is None else ssm_element_bytes
        conv = self.conv_elements() + self.aux_conv_elements()
        return conv * element_bytes + self.ssm_elements() * ssm_bytes

    def bytes_per_sequence(self, num_tokens: int, element_bytes: int) -> int:
        """Bytes one sequence keeps, independent of ``num_tokens``."""
        return self.bytes_per_state(element_bytes)
