"""SGLang's DeepSeek-V4 pools (``DeepSeekV4TokenToKVPool``): what one page of each pool holds.

Read in the sglang 0.5.23 wheel (paths under ``sglang/``), on the default CUDA path for
``model_type`` ``deepseek_v4`` (not V4.1): ``--dsv4-attn-backend`` auto resolves to ``flashmla``
for it (``srt/arg_groups/deepseek_v4_hook.py`` lines 45-60), ``SGLANG_DSV4_KV_LAYOUT`` defaults
to ``v4`` (``srt/environ.py`` line 1754), no unified KV (HIP only,
``srt/layers/attention/dsv4/unified_kv_gate.py`` lines 12-15), no HiSparse, no online c128
(``srt/environ.py`` line 1830), float32 compressor states (line 1832), no speculative decoding:

* every layer keeps its sliding window in the SWA pool (``DeepSeekV4SingleKVPool``,
  ``srt/mem_cache/deepseek_v4_memory_pool.py`` lines 237-352): the ``v4`` row is 448 fp8 NoPE
  bytes + 64 bf16 RoPE dims + 7 ue8m0 scales + 1 pad = 584 B (the assert at lines 340-345), and
  a page of ``P`` rows is padded to a multiple of 576 B (``KVLayout.page_bytes``,
  ``kernels/ops/attention/dsv4/kv_layout.py`` lines 50-105);
* compress ratio 4 layers (CSA) keep ``P / 4`` compressed rows per page in the same ``v4``
  layout (``resolve_compressed_kv_layout`` lines 174-196 keep ``V4``) plus the indexer's key,
  ``index_head_dim + index_head_dim // 128 * 4`` uint8 per compressed row (lines 53-57, pages of
  ``P / 4`` rows with no padding, lines 593-625);
* compress ratio 128 layers (HCA) keep ``P / 128`` compressed rows per page (``v4`` layout);
* compressor states (``srt/model_executor/pool_configurator.py``): ratio 4 keeps a ring of 8
  rows (``get_compress_state_ring_size``, deepseek_v4_memory_pool.py lines 60-80) per SWA page,
  each row ``2 * 2 * head_dim`` plus ``2 * 2 * index_head_dim`` float32 (lines 1358-1370);
  ratio 128 a ring of 128 rows of ``2 * head_dim`` float32 per request slot (lines 1474-1497);
* layers of ratio 0 keep only the window. ``compress_ratios`` is read per layer from the config
  (``srt/configs/model_config.py`` lines 1419-1431: ``qk_nope_head_dim = head_dim -
  qk_rope_head_dim``, ``window_size = sliding_window``); the KV is one latent, the same on every
  TP rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.layouts.base import (
    SGLANG_PP_TAIL_SPLIT_VERSION,
    GroupBytes,
    LayoutNotApplicable,
    LayoutResult,
    StageBytes,
    sglang_pp_split,
)
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layer_kinds import has_compressed_attention
from kvbudget.spec.layers import CompressedAttention, CompressedSparseAttention, SlidingWindow
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

#: ``page_size = 256`` on CUDA whatever ``--page-size`` says: a model override declaration,
#: which wins over the command line (``srt/arg_groups/model_overrides/deepseek_v4.py`` lines
#: 51-61; ``srt/arg_groups/overrides.py`` lines 180-192, the last declaration first)
DSV4_PAGE_SIZE = 256
#: the ``v4`` row: 576 data bytes + 8 scale bytes (``kv_layout.py`` lines 50-91)
V4_ROW_BYTES = 584
#: ``KVLayout.V4.page_align`` (``kv_layout.py`` lines 87-95)
V4_PAGE_ALIGN = 576
#: the ``v4`` row's split: fp8 NoPE of 448, bf16 RoPE of 64 (``deepseek_v4_memory_pool.py``
#: lines 340-345 assert ``448 + 64 * 2 + 8``)
V4_NOPE_DIM = 448
V4_ROPE_DIM = 64
#: the fp8 indexer key: one float32 scale per 128 values (``deepseek_v4_memory_pool.py`` 53-57)
INDEX_QUANT_BLOCK = 128
INDEX_SCALE_BYTES = 4
#: compressor-state rings without speculative decoding (``get_compress_state_ring_size``,
#: ``deepseek_v4_memory_pool.py`` lines 60-80)
C4_RING = 8
C128_RING = 128
#: ``SGLANG_DSV4_COMPRESS_STATE_DTYPE`` float32 (``environ.py`` line 1832;
#: ``pool_configurator.py`` lines 136-146)
STATE_BYTES = 4
#: ``SGLANG_SWA_EVICTION_INTERVAL`` (``srt/environ.py`` line 730)
SWA_EVICTION_INTERVAL = 128
#: the compress ratios kvbudget models here; SGLang also accepts 1 and 2 (DeepSeek-V4.1's
#: ``kv_source_layer_ids``, ``collect_sources_by_ratio`` lines 94-115)
CSA_RATIO = 4
HCA_RATIO = 128


def is_sglang_dsv4(spec: ModelSpec) -> bool:
    """A model with DeepSeek-V4 compressed attention layers."""
    return has_compressed_attention(spec.layer_seq)


def v4_page_bytes(rows: int) -> int:
    """``KVLayout.V4.page_bytes(rows)``: ``rows * 584`` rounded up to 576 B."""
    return cdiv(rows * V4_ROW_BYTES, V4_PAGE_ALIGN) * V4_PAGE_ALIGN


def index_row_bytes(index_head_dim: int) -> int:
    """``get_dsv4_indexer_bytes_per_token(d, use_fp4_indexer=False)``: fp8 key + scales."""
    return index_head_dim + index_head_dim // INDEX_QUANT_BLOCK * INDEX_SCALE_BYTES


def sglang_dsv4_dtype(kv_dtype: str) -> str:
    """``_deepseek_v4_kv_cache_dtype`` (``srt/arg_groups/overrides.py`` lines 892-913): ``auto`` is
    ``fp8_e4m3`` on CUDA; only ``fp8_e4m3`` and ``bfloat16`` pass its assert. Both store the same
    ``v4`` rows (the pool is uint8 and its row fixed, ``deepseek_v4_memory_pool.py`` 328-352)."""
    key = kv_dtype.strip().lower()
    if key == "auto":
        return "fp8_e4m3"
    name = get_kv_dtype(key, engine="sglang").name
    if name not in ("fp8_e4m3", "bfloat16"):
        raise ConfigError(
            f"kv_dtype: {kv_dtype!r} is not supported by SGLang 0.5.23 for DeepSeek-V4 ("
            f"'{kv_dtype} is not supported for DeepseekV4ForCausalLM', srt/arg_groups/"
            "overrides.py lines 907-910); pass --kv-cache-dtype auto, fp8_e4m3 or bfloat16",
            field="kv_dtype",
        )
    return name


@dataclass(frozen=True, slots=True)
class Dsv4Stage:
    """The layers of one pipeline stage as SGLang's DeepSeek-V4 pools see them."""

    layers: LayerIndices  # every layer: each keeps its window in the SWA pool
    csa: LayerIndices  # compress ratio 4
    hca: LayerIndices  # compress ratio 128
    window: int
    head_dim: int  # ``qk_nope_head_dim + qk_rope_head_dim`` (512)
    index_head_dim: int


def dsv4_stage(spec: ModelSpec, start: int, end: int) -> Dsv4Stage:
    """Layers ``[start, end)`` of ``spec``; refuses in one line what SGLang's pools do not take."""
    if spec.model_type != "deepseek_v4":
        raise LayoutNotApplicable(
            f"model_type: {spec.model_type!r} with DeepSeek-V4 layers under SGLang: kvbudget "
            "models SGLang 0.5.23's deepseek_v4 path only (its config class is registered for "
            "deepseek_v4, srt/utils/hf_transformers/common.py line 224; deepseek_v41 takes other "
            "backends, pools and SWA sizing, srt/arg_groups/deepseek_v4_hook.py lines 45-60); "
            "use --engine hf, or measure"
        )
    rope = int(spec.raw_config.get("qk_rope_head_dim") or V4_ROPE_DIM)
    every: list[range] = []
    csa: list[range] = []
    hca: list[range] = []
    window = 0
    head_dims: set[int] = set()
    index_dim = 0
    for x, run in spec.layer_seq.runs():
        parts = LayerIndices([run]).split(start, end).ranges
        if not parts:
            continue
        r = parts[0]
        if isinstance(x, CompressedSparseAttention) and x.compress_rate == CSA_RATIO:
            csa.append(r)
            index_dim = x.index_head_dim
        elif isinstance(x, CompressedAttention) and x.compress_rate == HCA_RATIO:
            hca.append(r)
        elif isinstance(x, CompressedAttention):
            raise LayoutNotApplicable(
                f"compress_ratios: {x.compress_rate} at layer {r.start}: kvbudget models SGLang "
                f"0.5.23's DeepSeek-V4 pools for ratios 0, {CSA_RATIO} and {HCA_RATIO} (ratios 1 "
                "and 2 are DeepSeek-V4.1's kv_source pools, srt/mem_cache/"
                "deepseek_v4_memory_pool.py lines 94-115; others raise there); fix the config"
            )
        elif not (isinstance(x, SlidingWindow) and x.num_kv_heads == 1 and x.v_head_dim == 0):
            raise LayoutNotApplicable(
                f"layers: layer {r.start} of deepseek_v4 is {x.kind}: SGLang 0.5.23's DeepSeek-V4 "
                "pools hold one K=V latent window per layer plus compressed rows; fix the config"
            )
        every.append(r)
        window = max(window, x.sliding_window)
        head_dims.add(x.head_dim)
    if (head_dims and head_dims != {V4_NOPE_DIM + V4_ROPE_DIM}) or rope != V4_ROPE_DIM:
        raise LayoutNotApplicable(
            f"head_dim: {sorted(head_dims)} (qk_rope_head_dim {rope}) for deepseek_v4: SGLang "
            f"0.5.23's v4 KV row is {V4_NOPE_DIM} fp8 NoPE + {V4_ROPE_DIM} bf16 RoPE "
            "(srt/mem_cache/deepseek_v4_memory_pool.py lines 340-345 assert 584 bytes); use the "
            "checkpoint's head_dim 512 and qk_rope_head_dim 64"
        )
    return Dsv4Stage(
        LayerIndices(every),
        LayerIndices(csa),
        LayerIndices(hca),
        window,
        V4_NOPE_DIM + V4_ROPE_DIM,
        index_dim,
    )


def swa_slots_per_request(window: int, page_size: int) -> int:
    """SWA slots one running request holds at most: ``window + eviction_interval + page_size``
    trailing tokens (``compute_swa_request_cap``, ``pool_configurator.py`` lines 924-942: the
    window, the tokens decoded since the last eviction, a page of padding so the eviction point
    is page-aligned), in whole pages."""
    return cdiv(window + SWA_EVICTION_INTERVAL + page_size, page_size) * page_size


def dsv4_groups(
    stage: Dsv4Stage, *, tokens: int, seqs: int, page_size: int = DSV4_PAGE_SIZE
) -> list[GroupBytes]:
    """Bytes of ``seqs`` sequences of ``tokens`` tokens in SGLang's DeepSeek-V4 pools, one rank.

    A sequence takes whole ``page_size``-token pages of the full index; each page gives every
    CSA layer ``page_size / 4`` compressed rows and indexer keys, every HCA layer
    ``page_size / 128``; the SWA pool holds at most :func:`swa_slots_per_request` of its tokens
    (all of them while shorter); the ratio-4 compressor states ride the SWA pages, the ratio-128
    ones are a ring per request.
    """
    pages = cdiv(tokens, page_size)
    kept = pages * page_size
    swa_kept = min(kept, swa_slots_per_request(stage.window, page_size))
    swa_page = v4_page_bytes(page_size) * len(stage.layers)
    groups = [
        _group(
            "sliding",
            stage.layers,
            swa_kept,
            swa_page // page_size,
            swa_kept // page_size * swa_page,
            seqs,
            f"SWA pool: {v4_page_bytes(page_size)} B per {page_size}-token page per layer (v4 "
            f"rows of {V4_ROW_BYTES} B, 576-aligned), at most {swa_kept} tokens per request",
        )
    ]
    if stage.csa:
        rows = page_size // CSA_RATIO
        page = (v4_page_bytes(rows) + rows * index_row_bytes(stage.index_head_dim)) * len(stage.csa)
        groups.append(
            _group(
                "compressed_sparse",
                stage.csa,
                kept // CSA_RATIO,
                page // page_size,
                pages * page,
                seqs,
                f"c4 pool + indexer keys: {rows} compressed rows per page",
            )
        )
    if stage.hca:
        rows = page_size // HCA_RATIO
        page = v4_page_bytes(rows) * len(stage.hca)
        groups.append(
            _group(
                "heavily_compressed",
                stage.hca,
                kept // HCA_RATIO,
                page // page_size,
                pages * page,
                seqs,
                f"c128 pool: {rows} compressed rows per page ({v4_page_bytes(rows)} B, 576-aligned)",
            )
        )
    state = swa_kept // page_size * C4_RING * c4_state_row_bytes(stage) * len(
        stage.csa
    ) + C128_RING * c128_state_row_bytes(stage) * len(stage.hca)
    if state:
        groups.append(
            GroupBytes(
                "compressor_state",
                LayerIndices([*stage.csa.ranges, *stage.hca.ranges]),
                0,
                0,
                state,
                state * seqs,
                f"float32 compressor states: {C4_RING} rows per SWA page (c4), a ring of "
                f"{C128_RING} rows per request (c128)",
            )
        )
    return groups


def c4_state_row_bytes(stage: Dsv4Stage) -> int:
    """One c4 state row: ``2 * 2 * head_dim`` + ``2 * 2 * index_head_dim`` float32
    (``pool_configurator.py`` lines 1365-1366)."""
    return 2 * 2 * (stage.head_dim + stage.index_head_dim) * STATE_BYTES


def c128_state_row_bytes(stage: Dsv4Stage) -> int:
    """One c128 state row: ``2 * head_dim`` float32 (``pool_configurator.py`` line 1489)."""
    return 2 * stage.head_dim * STATE_BYTES


def _group(
    kind: str,
    indices: LayerIndices,
    kept: int,
    per_token: int,
    per_seq: int,
    seqs: int,
    note: str,
) -> GroupBytes:
    return GroupBytes(kind, indices, kept, per_token, per_seq, per_seq * seqs, note)


def sglang_dsv4_layout(
    spec: ModelSpec, *, tokens: int, seqs: int, kv_dtype: str, tp: int, pp: int, dp: int
) -> LayoutResult:
    """``calc --engine sglang`` for DeepSeek-V4: :func:`dsv4_groups` per pipeline stage, the same
    on every TP rank."""
    name = sglang_dsv4_dtype(kv_dtype)
    stages: list[StageBytes] = []
    for rank in range(pp):
        # SGLang's split (0.5.23, where kvbudget read DeepSeek-V4's pools; layouts.base)
        start, end = sglang_pp_split(SGLANG_PP_TAIL_SPLIT_VERSION)(spec.num_layers, rank, pp)
        groups = dsv4_groups(dsv4_stage(spec, start, end), tokens=tokens, seqs=seqs)
        stages.append(StageBytes(rank, start, end, tuple(groups)))
    return LayoutResult(
        "sglang",
        name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        tuple(stages),
        block_size=DSV4_PAGE_SIZE,
        notes=(
            f"SGLang DeepSeek-V4 pools (deepseek_v4_memory_pool.py): {DSV4_PAGE_SIZE}-token pages; "
            "the SWA window of every layer, the c4 / c128 compressed rows (v4 layout, 584 B per "
            "row, pages 576-aligned), the c4 indexer keys and float32 compressor states; kv "
            f"dtype {name} stores the same v4 rows; the same on every TP rank",
        ),
    )
