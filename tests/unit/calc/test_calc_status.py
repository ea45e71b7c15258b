"""Status and assumption checklist in model mode (derived from structure, dtype and layout)."""

from __future__ import annotations

from kvbudget.capacity.kvbytes import calc_model


def reasons(result_reasons: list[str]) -> set[str]:
    return {r.split(":")[0] for r in result_reasons}


def test_dense_whole_blocks_is_exact() -> None:
    result = calc_model("meta-llama/Llama-3.1-8B", tokens=4096, seqs=8)
    assert result.status == "exact" and result.reasons == []


def test_partial_block_is_structural_reference() -> None:
    result = calc_model("meta-llama/Llama-3.1-8B", tokens=1000, seqs=1)
    assert result.status == "structural_reference" and reasons(result.reasons) == {
        "no_block_padding"
    }


def test_fp8_per_tensor_has_no_metadata_but_per_token_head_does() -> None:
    assert calc_model("meta-llama/Llama-3.1-8B", tokens=4096, kv_dtype="fp8").status == "exact"
    scaled = calc_model("meta-llama/Llama-3.1-8B", tokens=4096, kv_dtype="int8_per_token_head")
    assert reasons(scaled.reasons) == {"no_quant_metadata"}
    ggml = calc_model("meta-llama/Llama-3.1-8B", engine="llamacpp", tokens=4096, kv_dtype="q8_0")
    assert reasons(ggml.reasons) == {"no_quant_metadata"}


def test_sliding_hybrid_and_mla_are_references() -> None:
    gemma = calc_model("google/gemma-2-9b", engine="hf", tokens=4096)
    assert {"full_attention", "no_sliding_window"} <= reasons(gemma.reasons)
    jamba = calc_model("ai21labs/AI21-Jamba-1.5-Mini", engine="hf", tokens=4096)
    assert "no_hybrid_state" in reasons(jamba.reasons)
    mla = calc_model("deepseek-ai/DeepSeek-V3", tokens=4096)
    assert "full_attention" in reasons(mla.reasons)


def test_unmappable_layout_is_not_applicable() -> None:
    result = calc_model("MiniMaxAI/MiniMax-Text-01", engine="llamacpp", tokens=4096)
    assert result.status == "not_applicable" and result.total_bytes is None
    assert "measure" in result.reasons[0]
