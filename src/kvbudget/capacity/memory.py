"""Engine memory accounting per rank: requested memory, the non-KV terms and available KV bytes.

vLLM V1 (reference §3.2): ``requested = total * gpu_memory_utilization``;
``non_kv = weights + peak activation + non-torch increase`` (+ CUDA-graph memory from v0.20: the wheels default the estimate on from 0.20.0);
``available = requested - non_kv``; ``--kv-cache-memory`` (bytes per GPU) replaces all of it.

The activation, non-torch and CUDA-graph terms are *estimates* unless the user passes the figures
from an engine log; each term carries its method so a reader can judge it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvbudget.spec.model import ModelSpec
from kvbudget.units import GiB, MiB

TermSource = Literal["flag", "read", "computed", "estimated"]

#: calibration factor of the activation rule (see :func:`estimate_activation_bytes`)
ACTIVATION_FACTOR = 2.5
#: vLLM's redundancy buffer in its --kv-cache-memory suggestion (§3.2)
REDUNDANCY_BUFFER_BYTES = 150 * MiB
#: CUDA context + allocator slack outside vLLM's profiled budget (estimate)
CUDA_CONTEXT_BYTES = 512 * MiB


@dataclass(frozen=True, slots=True)
class MemoryTerm:
    """One term of a memory budget, with how it was obtained."""

    name: str
    num_bytes: int
    source: TermSource
    method: str

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "bytes": self.num_bytes,
            "gib": round(self.num_bytes / GiB, 4),
            "source": self.source,
            "method": self.method,
        }


def estimate_activation_bytes(
    spec: ModelSpec, *, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> MemoryTerm:
    """Peak activation of vLLM's profile run (a dummy forward of ``max_num_batched_tokens``).

    Rule: ``2.5 x [T_b x 2 B x (2*hidden + qkv_out/tp + 3*mlp_inter/tp) + max_num_seqs x vocab x 8 B]``
    where ``mlp_inter`` is ``top_k x moe_intermediate`` for MoE models and the last term is the
    sampler's fp32 logits and probabilities. The factor 2.5 is calibrated on the two logged
    examples in the reference (Qwen2.5-7B-AWQ: 1.04 GiB logged; Qwen3-235B-A22B-FP8 TP4:
    1.40 GiB logged), which this rule lands within about +-35 % of.
    """
    h = spec.hidden_size or 0
    heads = spec.num_attention_heads or 1
    kv_heads = spec.num_kv_heads() or heads
    head_dim = h // heads if heads else 0
    head_dims = [
        getattr(layer, "head_dim", 0)
        for layer, _ in spec.layer_runs()
        if getattr(layer, "head_dim", 0)
    ]
    if head_dims:
        head_dim = max(head_dims)
    qkv = (heads + 2 * kv_heads) * head_dim // tp
    if spec.num_experts:
        inter = (spec.num_experts_per_tok or 1) * (
            spec.moe_intermediate_size or spec.intermediate_size or 0
        )
    else:
        inter = spec.intermediate_size or 4 * h
    per_token = 2 * (2 * h + qkv + 3 * inter // tp)
    sampler = max_num_seqs * (spec.vocab_size or 0) * 8
    total = int(ACTIVATION_FACTOR * (max_num_batched_tokens * per_token + sampler))
    return MemoryTerm(
        "activation",
        total,
        "estimated",
        f"rule of thumb: 2.5 x (T_b={max_num_batched_tokens} x {per_token} B + sampler "
        f"{max_num_seqs} x vocab x 8 B); vLLM measures this in its profile run - pass "
        "--activation-bytes with the logged 'peak activation' for an exact figure",
    )


def estimate_non_torch_bytes(
    *, tp: int, pp: int, version: tuple[int, int, int] = (0, 0, 0)
) -> MemoryTerm:
    """Non-torch memory growth after start-up (NCCL buffers, cuBLAS workspaces).

    From vLLM 0.19 on: the figures vLLM 0.19.0 logged on H100-80GB (``Memory profiling takes``
    lines of the runs in ``tests/fixtures/vllm_gpu_logs``), an estimate with that basis: 0.25 GiB
    on one GPU; 0.07 GiB per stage when pipeline stages are one GPU each; at TP >= 2
    ``2.01 + 0.03 x tp`` GiB (2.07 logged at TP 2, 2.13 at TP 4; other TP extrapolated). The
    0.19 source allocates the custom all-reduce and symmetric-memory buffers (64 MiB at TP 2,
    32 MiB at TP 4 on sm90, ``all_reduce_utils.py``) outside torch's allocator; the rest of the
    ~2 GiB is NCCL's own and is not in vLLM's source.

    Linear rule through the two logged values in the reference: 0.06 GiB on one GPU,
    0.21 GiB at TP 4 (0.05 GiB per extra rank of the world).
    """
    if version >= (0, 19, 0):
        if tp >= 2:
            gib, basis = 2.01 + 0.03 * tp, "2.01 + 0.03 x tp GiB (2.07 at TP2, 2.13 at TP4)"
        elif pp >= 2:
            gib, basis = 0.07, "0.07 GiB per stage at PP >= 2"
        else:
            gib, basis = 0.25, "0.25 GiB on one GPU"
        return MemoryTerm(
            "non_torch",
            int(gib * GiB),
            "estimated",
            f"{basis}: basis vLLM 0.19.0's logged non-torch memory on H100-80GB "
            "(docs/engine-facts.md); pass --non-torch-bytes from the engine log",
        )
    world = tp * pp
    num_bytes = int((0.06 + 0.05 * (world - 1)) * GiB)
    return MemoryTerm(
        "non_torch",
        num_bytes,
        "estimated",
        "0.06 GiB + 0.05 GiB per extra rank (fit to the reference's logged 0.06 GiB at 1 GPU and "
        "0.21 GiB at TP4); pass --non-torch-bytes from the engine log",
    )


#: vLLM's default ceiling of the CUDA-graph capture sizes on GPUs other than data-centre
#: Blackwell (vLLM 0.32.0 ``config/vllm.py`` ``_set_cudagraph_sizes``: ``default_max_graph_size``)
DEFAULT_MAX_GRAPH_SIZE = 512
#: capture sizes behind the logged figures (max_num_seqs 1024 -> ceiling 512 -> 51 sizes)
LOGGED_CAPTURE_SIZES = 51


def cudagraph_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, max_capture_size: int | None = None
) -> list[int]:
    """vLLM's default capture sizes (0.19.0 and 0.32.0 ``config/vllm.py``
    ``_set_cudagraph_sizes``): ``[1, 2, 4] + range(8, 256, 8) + range(256, ceiling + 1, 16)``
    with ``ceiling = min(2 x max_num_seqs, 512)`` (no speculative decoding) unless the model
    sets ``max_cudagraph_capture_size`` (``max_capture_size``), then at most
    ``max_num_batched_tokens``, which is added when it fits under the ceiling."""
    ceiling = (
        max_capture_size if max_capture_size else min(2 * max_num_seqs, DEFAULT_MAX_GRAPH_SIZE)
    )
    ceiling = min(ceiling, max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= ceiling}
    sizes.update(range(8, min(ceiling + 1, 256), 8))
    sizes.update(range(256, ceiling + 1, 16))
    if max_num_batched_tokens <= ceiling:
        sizes.add(max_num_batched_tokens)
    return sorted(sizes)


def model_capture_ceiling(spec: ModelSpec) -> int | None:
    """A model's own ``max_cudagraph_capture_size``: gpt-oss raises it from 512 to 1024 ("83
    graphs instead of 67"; vLLM 0.19.0 and 0.32.0 ``model_executor/models/config.py``
    ``GptOssForCausalLMConfig.verify_and_update_config``)."""
    return 1024 if spec.architecture == "GptOssForCausalLM" else None


def estimate_cudagraph_bytes(
    spec: ModelSpec,
    *,
    num_layers: int | None = None,
    tp: int = 1,
    max_num_seqs: int = 1024,
    max_num_batched_tokens: int = 8192,
    max_capture_size: int | None = None,
) -> MemoryTerm:
    """CUDA-graph memory of one GPU: what ``capture_model`` takes, per vLLM version's rule.

    vLLM measures it; no rule in its source gives the size. What the source gives (0.32.0
    ``v1/worker/gpu_model_runner.py`` ``profile_cudagraph_memory``) is the shape of the figure:
    the first (largest) capture plus a per-graph cost times the other capture sizes, and the
    capture sizes themselves (:func:`cudagraph_capture_sizes`). Dense models: an estimate with
    that shape, basis the ``CUDAGraph`` figures vLLM 0.19.0 logged on H100-80GB
    (``tests/fixtures/vllm_gpu_logs``, 51 capture sizes): ``0.38 GiB + 0.0167 GiB x layers of the
    stage / sqrt(tp)``, the per-layer part scaled by capture sizes / 51 (0.91 logged for 32
    layers, 0.65 for 16, 0.51 for 8, 0.76 at TP 2, 0.67 at TP 4). MoE models: the one logged
    MoE figure in the reference (3.45 GiB, Qwen3-235B-A22B at TP 4 on an L40S: 256 sequences,
    51 capture sizes) times capture sizes / 51; the shared runs hold no MoE start-up to do
    better."""
    layers = spec.num_layers if num_layers is None else num_layers
    sizes = len(cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, max_capture_size))
    if spec.num_experts:
        return MemoryTerm(
            "cudagraph",
            int(3.45 * GiB * sizes / LOGGED_CAPTURE_SIZES),
            "estimated",
            f"3.45 GiB x {sizes}/51 capture sizes (MoE): the reference's one logged MoE figure "
            "(Qwen3-235B-A22B, TP 4, 51 sizes); vLLM measures it at start-up - pass "
            "--cudagraph-bytes with the logged 'CUDAGraph memory'",
        )
    gib = 0.38 + 0.0167 * layers / tp**0.5 * sizes / LOGGED_CAPTURE_SIZES
    return MemoryTerm(
        "cudagraph",
        int(gib * GiB),
        "estimated",
        f"0.38 GiB + 0.0167 GiB x {layers} layers / sqrt(tp {tp}) x {sizes}/51 capture sizes "
        "(vLLM 0.32.0 _set_cudagraph_sizes); basis vLLM 0.19.0's logged CUDAGraph memory on "
        "H100-80GB (docs/engine-facts.md); pass --cudagraph-bytes with the logged figure",
    )


def eager_cudagraph_term() -> MemoryTerm:
    """No CUDA graphs: vLLM's --enforce-eager sets cudagraph_mode NONE (vLLM 0.32.0
    ``vllm/config/vllm.py``), and the worker then subtracts no graph estimate from the KV
    budget (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``)."""
    return MemoryTerm("cudagraph", 0, "flag", "--enforce-eager: no CUDA graphs are captured")


def flag_term(name: str, num_bytes: int, flag: str) -> MemoryTerm:
    return MemoryTerm(name, num_bytes, "flag", f"{flag} (user-supplied, e.g. from an engine log)")


@dataclass(frozen=True, slots=True)
class RankMemory:
    """The vLLM memory budget of one GPU (one pipeline stage; every TP rank of it alike)."""

    pp_rank: int
    total_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int
    weights: MemoryTerm
    activation: MemoryTerm
    non_torch: MemoryTerm
    cudagraph: MemoryTerm
    cudagraph_subtracted: bool
    kv_cache_memory_override: bool
    available_kv_bytes: int
    num_layers: int
    group_size: int
    num_blocks: int  # this worker's own figure, before the min over workers
    kv_pool_bytes: int  # what this worker allocates: common num_blocks x page x group_size

    @property
    def non_kv_bytes(self) -> int:
        extra = self.cudagraph.num_bytes if self.cudagraph_subtracted else 0
        return self.weights.num_bytes + self.activation.num_bytes + self.non_torch.num_bytes + extra

    def to_dict(self) -> dict[str, object]:
        return {
            "pp_rank": self.pp_rank,
            "total_bytes": self.total_bytes,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "requested_bytes": self.requested_bytes,
            "weights": self.weights.to_dict(),
            "activation": self.activation.to_dict(),
            "non_torch": self.non_torch.to_dict(),
            "cudagraph": self.cudagraph.to_dict(),
            "cudagraph_subtracted": self.cudagraph_subtracted,
            "kv_cache_memory_override": self.kv_cache_memory_override,
            "non_kv_bytes": self.non_kv_bytes,
            "available_kv_bytes": self.available_kv_bytes,
            "available_kv_gib": round(self.available_kv_bytes / GiB, 2),
            "num_layers": self.num_layers,
            "group_size": self.group_size,
            "num_blocks": self.num_blocks,
            "kv_pool_bytes": self.kv_pool_bytes,
        }


def available_kv_bytes(
    *,
    total_bytes: int,
    gpu_memory_utilization: float,
    weights: int,
    activation: int,
    non_torch: int,
    cudagraph: int,
    subtract_cudagraph: bool,
    kv_cache_memory_bytes: int | None = None,
) -> tuple[int, int]:
    """``(requested, available)`` as vLLM computes them on one worker (floored to whole bytes)."""
    requested = int(total_bytes * gpu_memory_utilization)
    if kv_cache_memory_bytes is not None:
        return requested, kv_cache_memory_bytes
    non_kv = weights + activation + non_torch + (cudagraph if subtract_cudagraph else 0)
    return requested, int(total_bytes * gpu_memory_utilization - non_kv)
