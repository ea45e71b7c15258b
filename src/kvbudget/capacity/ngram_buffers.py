"""The GPU buffers vLLM 0.32 keeps for an n-gram ``--speculative-config`` (``ngram``,
``ngram_gpu``), counted in the plan's non-KV memory.

Line numbers are vLLM 0.32.0's (``site-packages/vllm/``). On a GPU with Triton vLLM 0.32 runs the
V2 model runner unless a feature rules it out (``config/vllm.py`` lines 702-738, 2914-2953;
neither n-gram method does):

* ``v1/worker/gpu/model_runner.py`` lines 273-289: with ``use_ngram()`` (``ngram`` and
  ``ngram_gpu``, ``config/speculative.py`` lines 1979-1980) ``RequestState`` keeps
  ``all_token_ids``, ``max_num_seqs x max_model_len`` int32, dense on the GPU instead of in
  host (UVA) memory (``v1/worker/gpu/states.py`` lines 32-42; ``buffer_utils.py`` lines
  153-158), on every rank;
* on the last pipeline rank ``init_speculator`` (``v1/worker/gpu/spec_decode/__init__.py`` lines
  79-84) builds ``NgramGPUSpeculator`` for both methods, which keeps ``scratch``
  (``max_num_seqs x cdiv(max_model_len, block_l)`` int64, ``block_l`` 256 from 1,024 tokens, 128
  from 256, 64 from 64, else the next power of two of the length, at least 16) and ``drafts``
  (``max_num_seqs x num_speculative_tokens`` int64): ``v1/worker/gpu/spec_decode/ngram/
  speculator.py`` lines 184-207.

All of them are allocated when the runner is built (``v1/worker/gpu_worker.py`` lines 545, 558),
after the start-up memory snapshot (line 534) and before the profile run, so vLLM counts them in
the memory it takes off the KV cache (``total_consumed``, ``utils/mem_utils.py`` lines 305-318);
they are not in "Model loading took" (a ``--weights-bytes`` figure), so they are added to it too.
The V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``) keeps its own ``max_num_seqs x max_model_len``
int32 copy for ``ngram_gpu`` only (``v1/worker/gpu_model_runner.py`` lines 617-633): not modelled.
"""

from __future__ import annotations

from typing import Any

from kvbudget.capacity.mtp_tokens import vllm_num_speculative_tokens
from kvbudget.units import cdiv

__all__ = ["NGRAM_GPU_METHODS", "NgramBuffers", "ngram_buffers"]

#: the methods whose V2 runner keeps these buffers (``use_ngram()``)
NGRAM_GPU_METHODS = ("ngram", "ngram_gpu")
INT32_BYTES = 4
INT64_BYTES = 8


def _block_l(max_model_len: int) -> int:
    """``NgramGPUSpeculator.block_l`` (``speculator.py`` lines 187-195)."""
    if max_model_len >= 1024:
        return 256
    if max_model_len >= 256:
        return 128
    if max_model_len >= 64:
        return 64
    return max(16, 1 << (max(max_model_len, 1) - 1).bit_length())


class NgramBuffers:
    """Per-GPU bytes of the n-gram buffers: ``every_rank_bytes`` on each pipeline stage,
    ``last_stage_bytes`` more on the last."""

    def __init__(self, every_rank_bytes: int, last_stage_bytes: int) -> None:
        self.every_rank_bytes = every_rank_bytes
        self.last_stage_bytes = last_stage_bytes

    def describe(self, max_num_seqs: int, max_model_len: int) -> str:
        return (
            f"+ n-gram buffers: all_token_ids {max_num_seqs} x {max_model_len} int32 = "
            f"{self.every_rank_bytes:,} B per GPU, the speculator's scratch and drafts "
            f"{self.last_stage_bytes:,} B on the last stage (vLLM 0.32 V2 runner)"
        )


def ngram_buffers(
    speculative: dict[str, Any], *, max_num_seqs: int, max_model_len: int
) -> NgramBuffers:
    """The n-gram buffers of this speculative config (parsed; method ``ngram`` or
    ``ngram_gpu``) for ``max_num_seqs`` requests of ``max_model_len`` tokens (module doc).
    Its ``num_speculative_tokens`` as vLLM 0.32 takes it, refused in vLLM's words
    (:func:`kvbudget.capacity.mtp_tokens.vllm_num_speculative_tokens`)."""
    tokens = vllm_num_speculative_tokens(speculative, None, "this model")
    every = max_num_seqs * max_model_len * INT32_BYTES
    scratch = max_num_seqs * cdiv(max_model_len, _block_l(max_model_len)) * INT64_BYTES
    drafts = max_num_seqs * tokens * INT64_BYTES
    return NgramBuffers(every, scratch + drafts)
