"""The rules of the vllm layout worked from vLLM 0.32.0's source where no recorded CPU pool checks
them: one row per family, rendered in docs/architectures.md by ``scripts/architectures_doc.py``."""

from __future__ import annotations

from kvbudget.capacity.layouts.vllm_dsv41 import DSV41_SOURCE_RULE

__all__ = ["VLLM_SOURCE_RULES"]

#: rules of the vllm layout worked from vLLM 0.32.0's source where no recorded CPU pool checks
#: them (docs/architectures.md renders this table): family -> (rule, source lines, the test that
#: works the numbers by hand from that source)
VLLM_SOURCE_RULES: dict[str, tuple[str, str, str]] = {
    "deepseek_v32, glm_moe_dsa, hy_v4": (
        "MLA latent page + the lightning indexer's key page (block x (index_head_dim + "
        "index_head_dim / 128 x 4) bytes, uint8, whatever --kv-cache-dtype) on every layer that "
        "builds an indexer; all layers in ONE UniformType group whose page is the sum; block 64",
        "model_executor/models/deepseek_v2.py 659-667, 723-736, 1144-1168; "
        "v1/kv_cache_interface.py 698, 1225-1265; v1/core/kv_cache_utils.py 1520-1551, 2189-2193; "
        "v1/attention/backends/mla/indexer.py 284-285; models/hy_v4/nvidia/attention.py 82-110, "
        "179-189 (HYV4: the same indexer cache; indexer_types when given)",
        "tests/unit/plan/test_plan_dsa_indexer.py, tests/unit/spec/test_new_architectures.py",
    ),
    "deepseek_v4": (
        "per layer a sliding-window page (block 64, 584 B per token fp8_ds_mla); at compress "
        "ratio 4 / 128 a compressed-MLA page (block 256, 256 / ratio states of 584 B) and a float32 "
        "compressor-state sliding page (block 4 / 8, window 8 / 128, 2 x coff x head_dim values "
        "per token); at ratio 4 also the indexer's keys (132 B per state) and its compressor state; "
        "pages padded to 576 B; specs bucketed by block size, type and window, balanced buckets "
        "split by _approximate_gcd repeats, each block one page of every group side by side "
        "(bytes per block = the widest group; with no ratio-4 layer no bucket repeats, and each "
        "sliding bucket is split as a state bucket); block 256 whatever --block-size; "
        "--kv-cache-dtype "
        "auto / fp8* -> fp8_ds_mla, anything else refused (as vLLM does); deepseek_ref refused. "
        "Weights (plan): the target module by module - fp8 linears with one e8m0 byte per 128 x "
        "128 block, MXFP4 routed experts (NVFP4 with moe_quant_algo NVFP4); with expert_dtype fp8 "
        "(Flash-Base) a float32 scale per block and fp8 routed experts (Fp8MoEMethod, float32 "
        "block scales; a rank's rows not whole 128-blocks refused); bf16 compressor "
        "fused_wkv_wgate / indexer weights_proj, fp32 mHC, sinks and ape, int32 hash tables, the "
        "shared expert padded to 128-blocks per rank; per stage fp32 rotary caches (one per "
        "get_rope key: ratio-1 and compressed layers) and the max_num_batched_tokens x index_topk "
        "int32 topk_indices_buffer; other quantizations refused, an expert_dtype other than fp4 "
        "/ fp8 in vLLM's words; --disable-hybrid-kv-cache-manager refused with vLLM's own "
        "TypeError (its unification rebuilds each SlidingWindowMLASpec as an MLAAttentionSpec, "
        "which has no bounded_replay)",
        "models/deepseek_v4/attention.py 93-126, 195-317, 233, 298, 345, 366, 856-880, 907-920, "
        "974-1031; models/deepseek_v4/nvidia/model.py 133-176, 661-896, 1061-1141, 1287-1389, "
        "1818-1843; models/deepseek_v4/quant_config.py 21, 57-84, 139-199; "
        "models/deepseek_v4/common/rope.py 9-52; rotary_embedding/deepseek_scaling_rope.py "
        "224-255; quantization/fp8.py 312-339, 538-662; fused_moe/oracle/fp8.py 288-386; "
        "quantization/mxfp4.py 659-731; quantization/modelopt.py 892-1006; "
        "models/deepseek_v4/compressor.py 140-193, 261, 283; v1/attention/backends/mla/"
        "sparse_swa.py 74-140; v1/kv_cache_interface.py 119-138, 210-235, 545-565, 676-683, "
        "956, 1225-1293; v1/core/kv_cache_utils.py 1195-1227, 1520-1551, 1690-1821, 1825-1994, "
        "2159-2205, 2300-2308; "
        "models/deepseek_v4/sparse_mla.py 61; platforms/cpu.py 282-291",
        "tests/unit/plan/test_plan_dsv4_vllm.py (by hand, and 2 recorded CPU pools: "
        "tests/peer/test_vllm_pool_oracle.py); tests/unit/plan/test_plan_dsv4_state_buckets.py "
        "(by hand, equal to vLLM's own packing run on the specs); "
        "tests/unit/plan/test_plan_dsv4_weights_vllm.py "
        "(target weights by hand: Flash / Pro at TP 1 and 8, Flash-NVFP4, Flash with expert_dtype "
        "fp8, whose fp8 experts and float32 scales vLLM's own create_weights made on the CPU, "
        "scripts/check_vllm_dsv4_fp8_experts.py (the model needs AMX fp8 kernels there); the tiny target's "
        "modules and buffers as vLLM CPU built them, scripts/vllm_target_bytes.py)",
    ),
    "deepseek_v41, deepseek_v41_text": DSV41_SOURCE_RULE,
    "dots3_note (the checkpoint's flat format; transformers' wrapper and dots3_note_text refused)": (
        "sliding layers: a SlidingWindowMLASpec of swa_kv_lora_rank + swa_qk_rope_head_dim per "
        "token (window sliding_window_size); DSA layers: the indexer's keys (index_head_dim + "
        "index_head_dim / 128 x 4 uint8) and a latent page padded to the sliding rows; block 64 "
        "(a multiple of 64 if given); KV auto / bf16 / fp16 only; vLLM's packed groups (DSA "
        "latents + keys one group, sliding layers split by _approximate_gcd repeats), bytes per "
        "block = the widest group rounded up to the lcm of the DSA row (and, above block 64, the "
        "64-token indexer page); the same on every TP rank; a quantized KV and compute "
        "capability 12 refused in vLLM's words (the DSA impl raises 'FlashAttnMLASparseImpl "
        "currently supports only FP16/BF16 KV cache.', flashattn_mla_sparse.py 178-181; on 12 "
        "auto becomes fp8_ds_mla: mla_attention.py 358-375, 522-528; platforms/cuda.py 132-136); "
        "--speculative-config mtp: num_nextn_predict_layers (default 1) drafter layers of the "
        "mtp_layer_types kinds (default sliding) after the target's, each the target's spec of "
        "that kind (DSA: always an indexer), in the packed groups; more than one module with "
        "num_speculative_tokens k > 1: every sliding window keeps k - 1 more tokens "
        "(extra_retained_tokens); the drafter's weights not sized; --disable-hybrid-kv-cache-manager with sliding and DSA "
        "layers refused with vLLM's TypeError (replace_as passes SlidingWindowMLASpec's "
        "bounded_replay to MLAAttentionSpec), the same pool with one layer kind",
        "models/dots3_note/nvidia/model.py 227-239, 262-274, 306, 352-483, 524-534, 587; "
        "models/dots3_note/nvidia/mtp.py 53-57, 103-120; config/speculative.py 664-678, "
        "1490-1501, 1982-1988; config/vllm.py 644-662; "
        "v1/core/single_type_kv_cache_manager.py 1169; transformers_utils/configs/dots3_note.py "
        "24; models/dots3_note/nvidia/attention.py 434-452, 693-717; model_executor/models/"
        "deepseek_v2.py 658-666, 723-736, 1138-1189; model_executor/layers/attention/"
        "mla_attention.py 358-375, 487-490, 522-528, 1350-1373; "
        "v1/attention/backends/mla/flashattn_mla_sparse.py 38-50, 77-78, "
        "93-96, 178-181; sparse_utils.py 44-47; indexer.py 283-285; v1/worker/utils.py 476-486, "
        "515-561; "
        "v1/kv_cache_interface.py 183-193, 545-560, 859-884, 949-966, 1253, 1282-1295; "
        "v1/core/kv_cache_utils.py 1520-1551, 1690-1821, 1825-1994, 2159-2211, 2583-2590; "
        "v1/kv_cache_interface.py 119-138, 956; platforms/interface.py 699-781; "
        "transformers_utils/config.py 94",
        "tests/unit/plan/test_plan_dots3_vllm.py, test_plan_dots3_mtp_vllm.py (by hand; no CPU "
        "pool: the model imports "
        "vllm_flash_attn, CUDA only; scripts/check_dots3_vllm_groups.py runs vLLM's own grouping "
        "on those specs)",
    ),
    "qwen4_exp, qwen4_exp_text (QSA: the indexer_* fields set)": (
        "linear layers: a GDN MambaSpec (conv [conv_dim / tp, kernel - 1], temporal [v_heads / "
        "tp, v_dim, k_dim], both the model dtype); ple_layer_ids layers also a PLE MambaSpec "
        "[hc_count x hidden, (ple_conv_kernel_size - 1) x ngram_size], not split by TP; indexed "
        "layers: the K/V FullAttentionSpec, the indexer's raw-key ring (CircularBufferSpec of "
        "ratio x cdiv(ratio + spec tokens, ratio) bf16 rows of indexer_head_dim, one page per "
        "request; + 3 int64 M-RoPE positions where the multimodal model keeps M-RoPE) and its "
        "compressed keys (MLAAttentionSpec, B / ratio bf16 rows; 1-byte e4m3 with "
        "--attention-config indexer_kv_dtype fp8); block = a x cdiv(largest "
        "state page, a x K/V bytes per token), a = max(16, --block-size), rounded up to a "
        "multiple of 16 (--block-size 24 is served as 32), states padded to that page; vLLM's packed groups (K/V + compressed keys one group, rings one, "
        "GDN / PLE buckets split by _approximate_gcd repeats and the states one block holds); "
        "bf16 model, KV auto / bf16 / fp8 only; --block-size a multiple of the ratio; "
        "--speculative-config ngram / ngram_gpu / mtp: num_speculative_tokens widen both conv "
        "states and the ring and add as many speculative blocks per GDN / PLE group; mtp adds "
        "mtp_num_hidden_layers (default 1) QSA drafter layers at num_hidden_layers + k, each "
        "the target QSA layer's three specs, packed with the target's groups (unquantized, its "
        "weights as vLLM builds them, kvbudget.capacity.mtp_qwen4; ngram and ngram_gpu's GPU "
        "token copy and speculator buffers join the non-KV memory, as for every model: "
        "capacity.ngram_buffers); "
        "pp > 1: the whole model's groups projected onto each stage's layers, every worker at "
        "the smallest block count (refused with ple_layer_ids, as vLLM refuses it)",
        "models/qwen4_exp/__init__.py 22-47; models/qwen4_exp/nvidia/mtp.py 126-230; "
        "config/speculative.py 845-865, 1489-1501; "
        "models/qwen4_exp/nvidia/model.py 93, 217-263, "
        "446-448, 693-699, 787-907; models/qwen4_exp/nvidia/model_state.py 35-41; "
        "models/qwen4_exp/nvidia/qsa.py 188-191, 353-396, 460-468, 543-551; "
        "models/qwen4_exp/nvidia/indexer_qsa.py 115-181; models/qwen4_exp/nvidia/ple_layer.py "
        "165-187; models/qwen4_exp/common/qsa_cache.py 753-756, 773-780, 811-876; "
        "model_executor/layers/mamba/abstract.py 65-84; model_executor/layers/mamba/mamba_utils.py "
        "257-300; model_executor/models/config.py 853-878, 894-978; "
        "platforms/interface.py 750-795, 939-1122; v1/attention/backends/utils.py 208-244; "
        "v1/kv_cache_interface.py 227-234, 541-561, 686-756, 909-945, 1035-1107, 1253-1300; "
        "v1/core/kv_cache_utils.py 1195-1227, 1520-1551, 1627, 1825-2085, 2159-2211, 2276-2297, "
        "2486-2528, 2566-2678; distributed/utils.py 126-169",
        "tests/unit/plan/test_plan_qwen4_exp_vllm.py, test_plan_qwen4_exp_mtp_vllm.py, "
        "test_plan_qwen4_weights_vllm.py (by hand; scripts/check_vllm_qwen4_exp_weights.py "
        "builds vLLM's target and drafter modules on the meta device; "
        "no CPU pool: the model is CUDA "
        "and ROCm only; scripts/check_qwen4_exp_vllm_groups.py runs vLLM's own grouping on "
        "those specs)",
    ),
    "inkling_model (vLLM's Inkling format; inkling_text refused as vLLM fails on it)": (
        "per layer a conv-state SlidingWindowSpec (block = window = sconv_kernel_size, KV heads "
        "of the next power of two of 2 x head_dim + 2 x hidden / KV heads, bfloat16, no V), "
        "registered before the attention (sliding: swa_* heads over sliding_window_size; full: "
        "num_key_value_heads x head_dim); the generic page unification (blocks scaled to the "
        "largest page) groups them; tp <= KV heads",
        "models/inkling/nvidia/sconv_swa_attn.py 142-199; models/inkling/nvidia/model.py 137-170; "
        "models/inkling/nvidia/attention.py 183-198; models/inkling/configs.py 14-137",
        "tests/unit/spec/test_inkling.py (by hand, and the recorded CPU pool "
        "inkling_og_format: tests/peer/test_vllm_pool_oracle.py)",
    ),
    "mimo_v2_flash": (
        "sliding window = sliding_window_size (transformers attends one token more); sliding "
        "layers swa_num_key_value_heads x (swa_head_dim K + swa_v_head_dim V); each layer's own "
        "KV heads split max(1, heads // tp) per rank (8 sliding, 4 full; one replicated head when "
        "tp >= heads), in the pages and in the K / V projections' weights; the fp8 checkpoint at "
        "a TP whose sliding K heads per rank are no whole 128-row blocks (TP 8, 16) refused with "
        "the loader's words ('start (12) + length (2) exceeds dimension size (12)'); weights: "
        "the router (GateLinear) whole on every rank in moe_router_dtype (default float32) plus "
        "its fp32 e_score_correction_bias, and on each sliding layer one attention_sink_bias per "
        "local head (swa_num_attention_heads // tp) in the model dtype",
        "model_executor/models/mimo_v2.py 158-170, 241-271, 292-298, 325-337, 380-418, 851-858; "
        "model_executor/layers/fused_moe/router/gate_linear.py 21; "
        "model_executor/layers/linear.py 84-93, 1050-1063, 1184-1193; "
        "model_executor/parameter.py 175-197",
        "tests/unit/spec/test_new_architectures.py; tests/unit/plan/test_plan_mimo_v2_vllm.py "
        "(by hand: K / V per rank at TP 1-8, a sliding layer's attention bytes and the pages at "
        "TP 4, the TP 8 refusal, the fp32 router and the sink bias per rank; a tiny "
        "mimo_v2_flash's router and sinks as vLLM CPU built them)",
    ),
    "zamba2": (
        "each 'hybrid' layer: its own Attention (every query head a KV head, attention_head_dim) "
        "plus a Mamba-2 mixer, the other layers a Mamba-2 mixer",
        "model_executor/models/zamba2.py 164-201 (QKVParallelLinear / Attention without "
        "num_kv_heads, one Attention per hybrid layer), 601-650, 762-780",
        "tests/unit/spec/test_new_architectures.py",
    ),
    "minicpm3": (
        "MLA paged as plain attention: every query head a KV head of qk_nope + qk_rope, V padded",
        "model_executor/models/minicpm3.py (Attention(num_local_heads, qk_head_dim))",
        "tests/peer/test_vllm_pool_oracle.py (recorded pool)",
    ),
    "minimax_m3": (
        "every layer's K/V (kv heads per rank) + on each sparse layer (sparse_attention_freq != 0) "
        "the indexer's key page (block x index_head_dim x 2 bytes, bf16 whatever --kv-cache-dtype, "
        "one head whatever TP); all layers in ONE UniformType group whose page is the sum; "
        "block 128 (a size not a multiple of 128 is refused)",
        "models/minimax_m3/nvidia/model.py 99-107, 356-364, 505-509, 562-571; "
        "models/minimax_m3/common/indexer.py 94-95, 118-121, 145-153; "
        "common/sparse_attention.py 163-165; platforms/interface.py 700-745; "
        "v1/core/single_type_kv_cache_manager.py 2685-2687; v1/core/kv_cache_utils.py 2189-2193",
        "tests/peer/test_vllm_pool_oracle.py (recorded CPU pools minimax_m3, minimax_m3_fp8: "
        "dense MLPs, as vLLM CPU has no MoE backend for swigluoai, and a torchvision import stub, "
        "scripts/vllm_cpu_stubs); tests/unit/plan/test_plan_minimax_m3_vllm.py (full size, "
        "worked by hand)",
    ),
    "attention + Mamba hybrids": (
        "mamba cache mode align by default from 0.32 (prefix caching on for generative hybrids); "
        "on the CPU build the SSM state is reset to float32 on AVX-512-BF16 CPUs unless "
        "--mamba-ssm-cache-dtype is float16/bfloat16 and equals the model's state dtype",
        "engine/arg_utils.py 2991, 3021; config/model.py 2257-2265; "
        "model_executor/models/config.py 685-693; platforms/cpu.py 39-88, 302-320",
        "tests/integration/vllm/test_vllm_hybrid_mamba_pool.py (real vLLM CPU engine)",
    ),
    "MTP drafters (deepseek_v3, deepseek_v32, glm_moe_dsa, glm4_moe, mimo, mimo_v2_flash)": (
        "no KV without --speculative-config; with method mtp: num_nextn_predict_layers more "
        "target layers after the target's, grouped with them (DSA: always with an indexer; "
        "MiMo-V2-Flash: one sliding layer whatever the config says); a drafter kv_cache_dtype "
        "of its own is refused; the drafter's weights join the last stage: per MTP layer "
        "eh_proj / input_proj 2 x hidden x hidden (unsplit, model dtype), three norms and one "
        "decoder layer of the target's kind (MoE for DeepSeek / GLM); mimo_v2_flash: five norms, "
        "eh_proj, a sliding attention (swa_* heads, o_proj in the model dtype, sink bias) and a "
        "dense MLP of intermediate_size; embedding and head shared with the target; without "
        "the drafter a snapshot's MTP tensors (safetensors headers) leave its total_size",
        "model_executor/models/deepseek_mtp.py 61, 76-111, 95-112, 147-165; deepseek_v2.py "
        "1158-1168, 1293-1297, 1654; models/deepseek_v32/nvidia/mtp.py 64-100, 171-187; "
        "models/deepseek_v32/attention.py 166-190; glm4_moe_mtp.py 80-104, 131-152; "
        "glm4_moe.py 353-356; "
        "mimo_mtp.py 43-65, 96-115; mimo_v2_mtp.py 57-119, 177; mimo_v2.py 77-101, 218-300, "
        "762-763; mimo.py 93; model_executor/models/utils.py 575-601; glm4_moe.py 495; "
        "v1/spec_decode/llm_base_proposer.py 1293-1317, 1422-1571; "
        "v1/worker/gpu_model_runner.py 5050-5073; v1/core/kv_cache_utils.py 1997-2085",
        "tests/unit/spec/test_mtp_layers.py; tests/unit/plan/test_plan_mtp_vllm.py (tiny "
        "deepseek_v3, glm4_moe, mimo and mimo_v2_flash with MTP: pools measured on vLLM CPU; "
        "full size worked by hand); tests/unit/plan/test_plan_mtp_weights_vllm.py (drafter "
        "weights of DeepSeek-V3, MiMo-7B, MiMo-V2-Flash and the tiny glm4_moe worked by hand; "
        "the tiny mimo_v2_flash drafter's modules as vLLM CPU built them); "
        "tests/unit/plan/test_plan_mtp_snapshot_vllm.py (MTP tensors off a snapshot's total)",
    ),
    "MTP drafters priced in the pool (deepseek_v4, minimax_m3)": (
        "--speculative-config method mtp: deepseek_v4's num_nextn_predict_layers layers at "
        "compress ratio 1 (one 64-token sliding page each, packed with the target's sliding "
        "groups; with several modules and num_speculative_tokens k > 1 every sliding spec, "
        "sliding pages and compressor states, keeps k - 1 more tokens: extra_retained_tokens); "
        "minimax_m3's num_mtp_modules sparse layers (K/V + bf16 indexer page) in the one "
        "uniform-type group; minimax_m3's drafter weights join the last stage (per module three "
        "norms, eh_proj 2 x hidden x hidden quantized as the checkpoint, one sparse MoE layer "
        "with its indexer q/k projections, fp32 router and shared expert); deepseek_v4's "
        "drafter weights join it too (per layer three norms, fp8 e_proj / h_proj with ue8m0 "
        "block scales, fp32 hc_head and mHC parameters, a ratio-1 attention with fp8 "
        "fused_wqa_wkv / wq_b / wo_a / wo_b and padded fp32 sinks, a bf16 gate, fp32 routing "
        "bias, the shared expert and MXFP4 routed experts, or with expert_dtype fp8 float32 "
        "block scales and fp8 routed experts (Fp8MoEMethod); an fp32 rotary cache of its own when "
        "no target layer has ratio 1; the target's max_num_batched_tokens x hc_mult x hidden "
        "hidden-state buffer); the NVFP4 checkpoints' drafter experts are refused by name",
        "models/deepseek_v4/nvidia/mtp.py 83-148, 221-253; models/deepseek_v4/attention.py "
        "229-284; models/deepseek_v4/nvidia/model.py 133-176, 724-795, 849-896, 1061-1141, "
        "1378-1389; models/deepseek_v4/quant_config.py 80-84, 186-199; quantization/mxfp4.py "
        "659-731; quantization/fp8.py 538-662; v1/spec_decode/llm_base_proposer.py 1466-1472, 1545-1590; "
        "models/minimax_m3/nvidia/mtp.py 42-67, 100-112; models/minimax_m3/nvidia/model.py "
        "195-270, 392-490, 678-763; model_executor/layers/linear.py 1352-1420; "
        "config/speculative.py 38-66, "
        "1141-1145, 1489-1501, 1982-1988; config/vllm.py 644-662; v1/core/kv_cache_utils.py "
        "1997-2012, 2583-2590",
        "tests/unit/plan/test_plan_dsv4_vllm.py, tests/unit/plan/test_plan_minimax_m3_vllm.py, "
        "tests/unit/plan/test_plan_mtp_weights_vllm.py (worked by hand, DeepSeek-V4-Flash / Pro at "
        "TP 1 and 8, Flash with expert_dtype fp8; vLLM CPU does not run DeepSeek-V4's MTP: "
        "cpu/mtp.py line 18; vLLM's own grouping and admission of the tiny model's specs with "
        "two MTP modules: scripts/check_dsv4_vllm_mtp.py)",
    ),
}
