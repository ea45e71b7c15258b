"""Properties of the KV calculator: linearity, TP monotonicity, one-line errors."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.capacity.kvbytes import explicit_bytes
from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.capacity.layouts.llamacpp import llamacpp_layout
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.spec.layers import FullAttention, LayerSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

from ..unit.calc.helpers_calc import run_main

LINEAR_MODELS = [
    "meta-llama/Llama-3.1-8B",
    "google/gemma-3-1b-it",
    "openai/gpt-oss-120b",
    "Qwen/Qwen3-Next-80B-A3B-Thinking",
    "ai21labs/AI21-Jamba-1.5-Mini",
    "google/gemma-3n-E4B-text",
]
SPECS = {m: resolve_model(m).spec for m in [*LINEAR_MODELS, "deepseek-ai/DeepSeek-V3"]}


def dense(num_layers: int, kv_heads: int, head_dim: int) -> ModelSpec:
    layers: tuple[LayerSpec, ...] = tuple(
        FullAttention(i, kv_heads, head_dim) for i in range(num_layers)
    )
    return ModelSpec("t/dense", "LlamaForCausalLM", "llama", layers, torch_dtype="bfloat16")


@settings(max_examples=60, deadline=None)
@given(
    layers=st.integers(1, 128),
    heads=st.integers(1, 64),
    head_dim=st.integers(1, 512),
    dtype_bytes=st.sampled_from([1, 2, 4]),
    tokens=st.integers(1, 1 << 20),
    seqs=st.integers(1, 256),
    k=st.integers(2, 8),
)
def test_explicit_linear_in_tokens_and_seqs(
    layers: int, heads: int, head_dim: int, dtype_bytes: int, tokens: int, seqs: int, k: int
) -> None:
    def total(t: int, s: int) -> int:
        return explicit_bytes(
            num_layers=layers,
            num_kv_heads=heads,
            head_dim=head_dim,
            dtype_bytes=dtype_bytes,
            tokens=t,
            seqs=s,
        )[2]

    assert total(tokens * k, seqs) == k * total(tokens, seqs)
    assert total(tokens, seqs * k) == k * total(tokens, seqs)
    assert total(tokens, seqs) == 2 * layers * heads * head_dim * dtype_bytes * tokens * seqs


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(LINEAR_MODELS),
    engine=st.sampled_from(["hf", "vllm", "sglang", "llamacpp"]),
    tokens=st.integers(1, 20_000),
    k=st.integers(2, 6),
)
def test_layout_bytes_linear_in_seqs(model: str, engine: str, tokens: int, k: int) -> None:
    spec = SPECS[model]
    assert spec is not None
    fn = {
        "hf": hf_layout,
        "vllm": vllm_layout,
        "sglang": sglang_layout,
        "llamacpp": llamacpp_layout,
    }[engine]
    assert (
        fn(spec, tokens=tokens, seqs=k).total_bytes
        == k * fn(spec, tokens=tokens, seqs=1).total_bytes
    )


@settings(max_examples=40, deadline=None)
@given(
    layers=st.integers(1, 64),
    heads=st.sampled_from([1, 2, 4, 8, 16, 32]),
    blocks=st.integers(1, 500),
    k=st.integers(2, 5),
    engine=st.sampled_from(["hf", "vllm", "sglang"]),
)
def test_dense_bytes_linear_in_tokens(
    layers: int, heads: int, blocks: int, k: int, engine: str
) -> None:
    spec = dense(layers, heads, 128)
    fn = {"hf": hf_layout, "vllm": vllm_layout, "sglang": sglang_layout}[engine]
    tokens = blocks * 16  # whole vLLM blocks, so paging adds nothing
    assert (
        fn(spec, tokens=tokens * k, seqs=1).total_bytes
        == k * fn(spec, tokens=tokens, seqs=1).total_bytes
    )


@settings(max_examples=40, deadline=None)
@given(
    layers=st.integers(1, 96),
    heads=st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
    tokens=st.integers(1, 50_000),
    engine=st.sampled_from(["vllm", "sglang"]),
)
def test_per_rank_never_grows_with_tp(layers: int, heads: int, tokens: int, engine: str) -> None:
    fn = vllm_layout if engine == "vllm" else sglang_layout
    spec = dense(layers, heads, 128)
    per_rank = [
        fn(spec, tokens=tokens, seqs=1, tp=tp).per_rank_max_bytes for tp in (1, 2, 4, 8, 16)
    ]
    assert all(a >= b for a, b in itertools.pairwise(per_rank))
    mla = SPECS["deepseek-ai/DeepSeek-V3"]
    assert mla is not None
    mla_ranks = [fn(mla, tokens=tokens, seqs=1, tp=tp).per_rank_max_bytes for tp in (1, 2, 4, 8)]
    assert all(a >= b for a, b in itertools.pairwise(mla_ranks))


BAD_COUNT = st.one_of(
    st.integers(max_value=0).map(str),
    st.floats(allow_nan=False, allow_infinity=False, min_value=0.01, max_value=1e6)
    .map(lambda x: f"{x:.3f}")
    .filter(lambda s: float(s) != int(float(s))),  # "1.000" is a whole number, so it is valid
    st.text(alphabet="xyz!@#%^&() ", min_size=1, max_size=8).filter(lambda s: s.strip() != ""),
)
SEED = {
    "--layers": "32",
    "--kv-heads": "8",
    "--head-dim": "128",
    "--dtype-bytes": "2",
    "--tokens": "4096",
    "--seqs": "8",
}


@settings(max_examples=60, deadline=None)
@given(flag=st.sampled_from(sorted(SEED)), value=BAD_COUNT, model_mode=st.booleans())
def test_invalid_input_is_always_one_line(flag: str, value: str, model_mode: bool) -> None:
    if model_mode:
        args = {"--model": "meta-llama/Llama-3.1-8B", "--tokens": "64", "--seqs": "2", "--tp": "1"}
        flag = flag if flag in args and flag != "--model" else "--tp"
    else:
        args = dict(SEED)
    args[flag] = value
    argv = ["calc", *[x for kv in args.items() for x in kv]]
    code, out, err = run_main(argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (argv, err)
    assert len(lines) == 1 and "Traceback" not in err and out == ""
    assert lines[0].split(":")[0] in {"ConfigError", "UsageError"}
