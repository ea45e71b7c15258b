"""Peak activation of vLLM's profile run, derived from what that run executes (vLLM >= 0.19).

vLLM 0.19.0 ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` measures the
activation term as the increase of torch's ``allocated_bytes.all.peak`` over ``profile_run()``
(``vllm/utils/mem_utils.py`` ``memory_profiling``). ``gpu_model_runner.profile_run`` runs:

1. ``_dummy_run(max_num_batched_tokens, is_profile=True)``: one forward of ``T`` tokens split
   over ``N = min(T, max_num_seqs)`` dummy requests, attention skipped (no metadata), then
   ``hidden_states[logit_indices]`` (``N`` rows). A stage that is not the first allocates the
   pipeline's receive buffers ``make_empty_intermediate_tensors(max_num_tokens)``
   (``hidden_states`` and ``residual``, ``T x hidden`` each) and keeps them.
2. On the last stage, ``_dummy_sampler_run(last_hidden_states)`` while the forward's
   ``hidden_states`` (``T x hidden``) is still referenced: ``torch.rand_like`` of the ``N`` rows,
   ``compute_logits`` (``N x vocab`` in the model dtype; at TP > 1 all-gathered, so every rank
   holds the whole vocabulary), then ``Sampler.forward`` (``vllm/v1/sample/sampler.py``):
   ``logits.to(float32)`` (a copy unless the model runs in float32), greedy ``argmax``,
   in-place temperature, top-k/top-p by ``apply_top_k_top_p_triton`` in place
   (``vllm/v1/sample/ops/topk_topp_triton.py``; it caches one ``min(SMs, N) x vocab`` float32
   buffer, SMs rounded as there), ``softmax`` (a new float32 ``N x vocab``) and
   ``random_sample``'s ``torch.empty_like(probs)`` (another). FlashInfer's sampler is opt-in in
   0.19 (``VLLM_USE_FLASHINFER_SAMPLER``), so ``forward_native`` runs.

The first GEMM after the snapshot also allocates PyTorch's cuBLAS workspace through the caching
allocator (32 MiB on compute capability 9.x: PyTorch ``CUDABlasHandlePool.cpp``
``getDefaultWorkspaceSize``, ``:4096:8``).

The forward part is a lower bound read from the compiled graph's structure (vLLM compiles the
model piecewise, split at attention: a piece's inputs, the previous attention output and the
residual, stay referenced by the caller while the MLP runs its ``gate_up`` output and the
activation): ``T x dtype x (3 x hidden + 3 x intermediate / tp)``; Inductor's own buffer reuse
is not modelled. For dense models on H100 the sampler phase is the peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.spec.model import ModelSpec
from kvbudget.units import GiB, MiB

#: PyTorch's default cuBLAS workspace on compute capability 9.x (``:4096:8``)
CUBLAS_WORKSPACE_BYTES = 32 * MiB
#: vLLM pads the vocabulary of ``ParallelLMHead`` to a multiple of 64
#: (``DEFAULT_VOCAB_PADDING_SIZE``, ``vocab_parallel_embedding.py``)
VOCAB_PADDING = 64
#: SM count used when the device's is unknown (H100 SXM: 132)
DEFAULT_NUM_SMS = 132


@dataclass(frozen=True, slots=True)
class ProfileActivation:
    """The two phases of vLLM's profile run on one pipeline stage, in bytes."""

    forward_bytes: int
    sampler_bytes: int
    method: str

    @property
    def peak_bytes(self) -> int:
        return max(self.forward_bytes, self.sampler_bytes)

    @property
    def sampler_is_peak(self) -> bool:
        return self.sampler_bytes >= self.forward_bytes


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def mlp_width(spec: ModelSpec, tp: int) -> int:
    """Per-rank MLP intermediate width of one token (MoE: ``top_k x moe_intermediate``)."""
    if spec.num_experts:
        inter = (spec.num_experts_per_tok or 1) * (
            spec.moe_intermediate_size or spec.intermediate_size or 0
        )
    else:
        inter = spec.intermediate_size or 4 * (spec.hidden_size or 0)
    return -(-inter // tp)


def profile_activation(
    spec: ModelSpec,
    *,
    dtype_bytes: int,
    tp: int,
    first_stage: bool,
    last_stage: bool,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    num_sms: int = DEFAULT_NUM_SMS,
) -> ProfileActivation:
    """Peak activation of one stage's profile run (vLLM 0.19.0 source; see module docstring)."""
    t = max_num_batched_tokens
    n = min(t, max_num_seqs)
    h = spec.hidden_size or 0
    vocab = spec.vocab_size or 0
    recv = 0 if first_stage else 2 * t * h * dtype_bytes
    forward = t * dtype_bytes * (3 * h + 3 * mlp_width(spec, tp)) + recv + CUBLAS_WORKSPACE_BYTES
    sampler = 0
    if last_stage and vocab:
        rows = n * vocab
        logits = n * _round_up(vocab, VOCAB_PADDING) * dtype_bytes
        as_fp32 = 0 if dtype_bytes == 4 else rows * 4
        probs_and_noise = 2 * rows * 4
        programs = min(num_sms, n)
        topk_buffer = min(_next_pow2(programs), num_sms) * vocab * 4 if n >= 8 else 0
        kept = (
            t * h * dtype_bytes + 2 * n * h * dtype_bytes
        )  # forward output, its N rows, rand_like
        sampler = (
            logits + as_fp32 + probs_and_noise + topk_buffer + kept + recv + CUBLAS_WORKSPACE_BYTES
        )
    method = (
        f"computed from vLLM 0.19.0's profile run (T={t}, N={n} dummy requests): forward "
        f"{forward / GiB:.2f} GiB = T x {dtype_bytes} B x (3 x hidden + 3 x MLP/tp)"
        + (" + PP receive buffers" if recv else "")
        + " + 32 MiB cuBLAS workspace"
        + (
            f"; sampler warm-up {sampler / GiB:.2f} GiB = N x vocab x ({dtype_bytes} B logits"
            + (" + 4 B float32 copy" if dtype_bytes != 4 else "")
            + " + 4 B softmax + 4 B noise) + top-k/top-p buffer + kept hidden states"
            if sampler
            else "; no sampler on this stage"
        )
        + "; see docs/engine-facts.md"
    )
    return ProfileActivation(forward_bytes=forward, sampler_bytes=sampler, method=method)
