"""KV-cache element types and what one row of ``n`` elements costs in bytes.

Sources (see ``/work/shared/reference``):

* vLLM ``--kv-cache-dtype`` (``engines-kv-accounting.md`` §4): ``auto`` = model dtype; fp16/bf16 = 2 B;
  every ``fp8*`` = 1 B with per-tensor scales that cost nothing per block;
  ``int8_per_token_head`` / ``fp8_per_token_head`` add one fp32 scale per token per head for K and
  for V (``page += 2*B*H*4``); ``nvfp4`` packs ``d//2 + d//16`` bytes per head row (fp4 data plus one
  fp8 scale per 16 elements); ``fp8_ds_mla`` is 656 B per token per MLA layer.
* llama.cpp ggml block types (``llamacpp.md`` §4; ``ggml-common.h``): a row of ``n`` elements
  costs ``n / block_elems * block_bytes``; q8_0 = 32 int8 + fp16 scale = 34 B, q4_0 = 18 B,
  q4_1 = 20 B, q5_0 = 22 B, q5_1 = 24 B, iq4_nl = 18 B per 32 elements.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.layouts.base import Layout
from kvbudget.errors import ConfigError

#: bytes per token per MLA layer of vLLM's ``fp8_ds_mla`` (512 fp8 + 16 scale + 128 bf16 rope)
FP8_DS_MLA_BYTES_PER_TOKEN = 656


@dataclass(frozen=True, slots=True)
class KvDtype:
    """A KV element type: ``block_bytes`` per ``block_elems`` elements, plus per-row scales."""

    name: str
    block_elems: int = 1
    block_bytes: int = 2
    row_scale_bytes: int = 0  # extra bytes per (token, head) row, e.g. a fp32 scale
    nvfp4: bool = False
    mla_bytes_per_token: int | None = None  # only for MLA-specific formats (fp8_ds_mla)
    quantized: bool = False
    description: str = ""

    @property
    def element_bytes(self) -> float:
        """Average bytes per element without row scales (e.g. 34/32 for q8_0)."""
        if self.nvfp4:
            return 0.5 + 1 / 16
        return self.block_bytes / self.block_elems

    @property
    def has_metadata(self) -> bool:
        """True when the type stores scales or block metadata next to the data."""
        return (
            self.block_elems > 1
            or self.row_scale_bytes > 0
            or self.nvfp4
            or self.mla_bytes_per_token is not None
        )

    def row_bytes(self, num_elements: int) -> int:
        """Bytes of one row (one token, one head or one ggml row) of ``num_elements`` elements."""
        if self.nvfp4:
            return num_elements // 2 + num_elements // 16
        if num_elements % self.block_elems:
            raise ConfigError(
                f"kv dtype {self.name}: a row of {num_elements} elements is not a multiple of its "
                f"block of {self.block_elems}; choose another --kv-dtype (e.g. f16)",
                field="kv_dtype",
            )
        return num_elements // self.block_elems * self.block_bytes + self.row_scale_bytes


def _plain(name: str, nbytes: int, description: str) -> KvDtype:
    return KvDtype(name=name, block_bytes=nbytes, quantized=nbytes == 1, description=description)


def _ggml(name: str, block_bytes: int, description: str) -> KvDtype:
    return KvDtype(
        name=name, block_elems=32, block_bytes=block_bytes, quantized=True, description=description
    )


KV_DTYPES: dict[str, KvDtype] = {
    "float32": _plain("float32", 4, "fp32, 4 B"),
    "float16": _plain("float16", 2, "fp16, 2 B"),
    "bfloat16": _plain("bfloat16", 2, "bf16, 2 B"),
    "fp8": _plain("fp8", 1, "fp8 e4m3 on CUDA, 1 B; per-tensor scales cost nothing per block"),
    "fp8_e4m3": _plain("fp8_e4m3", 1, "fp8 e4m3, 1 B; per-tensor scales"),
    "fp8_e5m2": _plain("fp8_e5m2", 1, "fp8 e5m2, 1 B; per-tensor scales"),
    "int8_per_token_head": KvDtype(
        "int8_per_token_head",
        block_bytes=1,
        row_scale_bytes=4,
        quantized=True,
        description="int8 + fp32 scale per token per head (K and V)",
    ),
    "fp8_per_token_head": KvDtype(
        "fp8_per_token_head",
        block_bytes=1,
        row_scale_bytes=4,
        quantized=True,
        description="fp8 + fp32 scale per token per head (K and V)",
    ),
    "nvfp4": KvDtype(
        "nvfp4", nvfp4=True, quantized=True, description="fp4 + fp8 scale per 16 elements"
    ),
    "fp8_ds_mla": KvDtype(
        "fp8_ds_mla",
        block_bytes=1,
        mla_bytes_per_token=FP8_DS_MLA_BYTES_PER_TOKEN,
        quantized=True,
        description="DeepSeek MLA fp8 layout, 656 B per token per layer (MLA only)",
    ),
    # llama.cpp ggml types (-ctk / -ctv)
    "f32": _plain("f32", 4, "ggml f32"),
    "f16": _plain("f16", 2, "ggml f16"),
    "bf16": _plain("bf16", 2, "ggml bf16"),
    "q8_0": _ggml("q8_0", 34, "32 int8 + fp16 scale = 34 B per 32"),
    "q4_0": _ggml("q4_0", 18, "32 nibbles + fp16 scale = 18 B per 32"),
    "q4_1": _ggml("q4_1", 20, "32 nibbles + fp16 scale + fp16 min = 20 B per 32"),
    "q5_0": _ggml("q5_0", 22, "32x5 bit + fp16 scale = 22 B per 32"),
    "q5_1": _ggml("q5_1", 24, "32x5 bit + fp16 scale + fp16 min = 24 B per 32"),
    "iq4_nl": _ggml("iq4_nl", 18, "non-linear 4 bit, 18 B per 32"),
}

_ALIASES = {
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
}
#: llama.cpp spells the plain types the ggml way
_GGML_ALIASES = {
    "float32": "f32",
    "fp32": "f32",
    "float16": "f16",
    "fp16": "f16",
    "half": "f16",
    "bfloat16": "bf16",
}

#: names each engine accepts (``auto`` is resolved against the model dtype); an engine registered
#: later adds its row with :func:`register_kv_dtypes`
ENGINE_DTYPES: dict[Layout, tuple[str, ...]] = {
    "hf": ("auto", "float32", "float16", "bfloat16"),
    "vllm": (
        "auto",
        "float16",
        "bfloat16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_ds_mla",
        "int8_per_token_head",
        "fp8_per_token_head",
        "nvfp4",
    ),
    "sglang": ("auto", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "fp8", "nvfp4"),
    "llamacpp": ("auto", "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"),
}

_BY_BYTES = {4: "float32", 2: "bfloat16", 1: "fp8"}


#: the model dtype a plan's ``--dtype float32`` (or ``float``) resolves to: vLLM's own name
#: ``float``, so ``auto`` KV follows it instead of the bf16 downcast of float32 *configs*
EXPLICIT_FLOAT32 = "float"


@dataclass(frozen=True, slots=True)
class KvDtypeRules:
    """How an engine reads a KV dtype name besides the names it accepts: ``ggml`` spellings
    (``f16``, not ``float16``: llama.cpp); ``auto`` fixed whatever the model (llama.cpp's default
    cache type ``f16``); ``halves_float32``: a float32 config's ``auto`` KV served in half
    precision (vLLM, SGLang)."""

    ggml: bool = False
    auto: str | None = None
    halves_float32: bool = False


_RULES: dict[Layout, KvDtypeRules] = {
    "hf": KvDtypeRules(),
    "vllm": KvDtypeRules(halves_float32=True),
    "sglang": KvDtypeRules(halves_float32=True),
    "llamacpp": KvDtypeRules(ggml=True, auto="f16"),
}


def register_kv_dtypes(
    engine: Layout, names: tuple[str, ...], rules: KvDtypeRules = KvDtypeRules()
) -> None:
    """Add an engine's KV dtypes (its folder's registration does, for an engine added later)."""
    unknown = [n for n in names if n != "auto" and n not in KV_DTYPES]
    if unknown:
        raise ValueError(f"engine {engine!r}: unknown KV dtypes {unknown}")
    ENGINE_DTYPES[engine] = names
    _RULES[engine] = rules


def dtype_for_model(model_dtype: str | None, *, engine: Layout) -> KvDtype:
    """The KV dtype ``auto`` resolves to for a model dtype on an engine."""
    raw = (model_dtype or "bfloat16").removeprefix("torch.")
    name = _ALIASES.get(raw, raw)
    rules = _RULES.get(engine, KvDtypeRules())
    if rules.auto is not None:
        # llama.cpp's default cache type is f16 whatever the weights are (-ctk/-ctv f16).
        return KV_DTYPES[rules.auto]
    if name in ("float8_e4m3fn", "float8_e5m2"):
        name = "fp8"
    if name == "float32" and rules.halves_float32 and raw != EXPLICIT_FLOAT32:
        # vLLM and SGLang serve fp32 configs in bf16/fp16 when dtype is auto.
        name = "bfloat16"
    if name not in KV_DTYPES:
        raise ConfigError(
            f"model dtype {model_dtype!r} is unknown; pass --kv-dtype explicitly", field="kv_dtype"
        )
    return KV_DTYPES[name]


def get_kv_dtype(name: str, *, engine: Layout = "vllm", model_dtype: str | None = None) -> KvDtype:
    """Look up a KV dtype by name for an engine; ``auto`` uses the model dtype."""
    key = name.strip().lower()
    ggml = _RULES[engine].ggml if engine in _RULES else False
    key = _GGML_ALIASES.get(key, key) if ggml else _ALIASES.get(key, key)
    if key == "auto":
        return dtype_for_model(model_dtype, engine=engine)
    allowed = ENGINE_DTYPES.get(engine)
    if allowed is None:
        raise ConfigError(
            f"engine {engine!r} is unknown; choose one of {', '.join(ENGINE_DTYPES)}",
            field="engine",
        )
    if key not in KV_DTYPES or key not in allowed:
        raise ConfigError(
            f"kv dtype {name!r} is not supported by {engine}; choose one of {', '.join(allowed)}",
            field="kv_dtype",
        )
    return KV_DTYPES[key]


def dtype_from_element_bytes(element_bytes: int) -> KvDtype:
    """The plain dtype of an explicit ``--dtype-bytes`` (1, 2 or 4)."""
    if element_bytes not in _BY_BYTES:
        raise ConfigError(
            f"dtype_bytes: {element_bytes} bytes per element is not supported; use 1 (fp8), 2 (fp16/bf16) or 4 (fp32)",
            field="dtype_bytes",
        )
    return KV_DTYPES[_BY_BYTES[element_bytes]]
