"""The roofline step-time arithmetic, compiled with the simulator's hot modules.

:class:`~kvbudget.sim.timing.RooflineTiming` derives the per-rank figures from the model, the
GPU and its :class:`~kvbudget.sim.timing.RooflineParams` (a pydantic model, so that module
stays interpreted); :class:`RooflineCost` holds them and prices one step, the call made once
per simulated step. The formula is the one in :mod:`kvbudget.sim.timing`'s docstring, written
in the same order of operations, so the compiled and the interpreted build give the same
floats.
"""

from __future__ import annotations

from typing import NamedTuple


class BatchShape(NamedTuple):
    """What one step computes, aggregated over its requests (a named tuple: built once per
    simulated step, and a tuple is built at C speed where a frozen dataclass sets each field
    through ``object.__setattr__``)."""

    num_prefill_tokens: int = 0
    #: sum over prefill chunks of n * (c + (n + 1) / 2)
    prefill_pairs: float = 0.0
    #: sum over prefill chunks of c + n (KV the chunk attends over)
    prefill_context_tokens: int = 0
    num_decode_seqs: int = 0
    #: sum over decode requests of their context (tokens attended)
    decode_context_tokens: int = 0


_new_tuple = tuple.__new__


def batch_shape(
    num_prefill_tokens: int,
    prefill_pairs: float,
    prefill_context_tokens: int,
    num_decode_seqs: int,
    decode_context_tokens: int,
) -> BatchShape:
    """``BatchShape(...)`` of every field, built by ``tuple.__new__`` (the named tuple's own
    ``__new__`` is interpreted Python even in the compiled build: about 3x the time, once per
    simulated step)."""
    return _new_tuple(
        BatchShape,
        (
            num_prefill_tokens,
            prefill_pairs,
            prefill_context_tokens,
            num_decode_seqs,
            decode_context_tokens,
        ),
    )


class RooflineCost:
    """Per-rank roofline figures of one replica and the time of one step."""

    __slots__ = (
        "_ar_fixed",
        "_ar_per_token",
        "_attn_flops_per_pair",
        "_bf16_flops_per_token",
        "_byte_rate",
        "_expert_miss",
        "_expert_weights",
        "_flops_per_token",
        "_flops_rate",
        "_gemm_rate",
        "_kv_per_token",
        "_step_overhead_s",
        "_weights",
    )

    def __init__(
        self,
        *,
        flops_per_token: float,
        attn_flops_per_pair: float,
        kv_per_token: float,
        weights: float,
        flops_rate: float,
        byte_rate: float,
        ar_per_token: float,
        ar_fixed: float,
        step_overhead_s: float,
        expert_weights: float = 0.0,
        expert_miss: float = 1.0,
        gemm_rate: float = 0.0,
        bf16_flops_per_token: float = 0.0,
    ) -> None:
        self._flops_per_token = flops_per_token
        self._attn_flops_per_pair = attn_flops_per_pair
        self._kv_per_token = kv_per_token
        self._weights = weights
        self._flops_rate = flops_rate
        self._byte_rate = byte_rate
        self._ar_per_token = ar_per_token
        self._ar_fixed = ar_fixed
        self._step_overhead_s = step_overhead_s
        self._expert_weights = expert_weights
        self._expert_miss = expert_miss
        #: the GEMMs' FLOP rate when it is not the attention's (8-bit GEMMs); 0: the same
        self._gemm_rate = gemm_rate
        #: with ``gemm_rate``: GEMM FLOPs a token of modules left in bf16 (ModelOpt
        #: ``exclude_modules``), priced at ``flops_rate``; not in ``flops_per_token`` then
        self._bf16_flops_per_token = bf16_flops_per_token

    def step_time_s(self, shape: BatchShape) -> float:
        """``max(compute, memory) + all-reduce + overhead`` of one step (0 for an empty one)."""
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0
        attn_flops = self._attn_flops_per_pair * (shape.prefill_pairs + shape.decode_context_tokens)
        if self._gemm_rate:
            compute_s = (
                self._flops_per_token * tokens / self._gemm_rate
                + (attn_flops + self._bf16_flops_per_token * tokens) / self._flops_rate
            )
        else:
            compute_s = (self._flops_per_token * tokens + attn_flops) / self._flops_rate
        kv_tokens = shape.prefill_context_tokens + shape.decode_context_tokens + tokens
        num_bytes = self._weights + self._kv_per_token * kv_tokens
        if self._expert_weights:
            # routed experts: a step reads the ones its tokens chose, E * (1 - (1 - k/E)^T) of
            # E on average when each token picks k of E uniformly (independent tokens)
            num_bytes += self._expert_weights * (1.0 - self._expert_miss**tokens)
        memory_s = num_bytes / self._byte_rate
        comm_s = self._ar_fixed + self._ar_per_token * tokens
        return max(compute_s, memory_s) + comm_s + self._step_overhead_s
