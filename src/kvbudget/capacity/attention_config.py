"""vLLM's ``--attention-config`` JSON: kvbudget reads its ``indexer_kv_dtype`` only.

vLLM 0.32.0 (``site-packages/vllm/``): ``--attention-config`` / ``-ac`` is ``VllmConfig``'s
``AttentionConfig`` (``engine/arg_utils.py`` lines 754, 864-865, 1856), whose
``indexer_kv_dtype: Literal["auto", "bf16", "fp8", "mxfp4", "nvfp4"] = "auto"`` is the
sparse-attention indexer's key-cache dtype, ``auto`` the model's default
(``config/attention.py`` lines 13, 88-92, 163-167). Its other fields (backends, kernel choices)
are not read here: a config that sets one is refused, not silently ignored.
"""

from __future__ import annotations

import json
from typing import Literal, cast, get_args

from kvbudget.errors import ConfigError

__all__ = ["INDEXER_KV_DTYPES", "IndexerKvDtype", "indexer_kv_dtype"]

IndexerKvDtype = Literal["auto", "bf16", "fp8", "mxfp4", "nvfp4"]
#: ``IndexerKVDType`` (``config/attention.py`` line 13)
INDEXER_KV_DTYPES: tuple[str, ...] = get_args(IndexerKvDtype)


def _refuse(text: str) -> ConfigError:
    return ConfigError(f"attention_config: {text}", field="attention_config")


def indexer_kv_dtype(attention_config: str | None) -> IndexerKvDtype:
    """``indexer_kv_dtype`` of an ``--attention-config`` JSON (``auto`` without one), refused in
    one line where it is not vLLM's JSON object, names a value vLLM does not take, or sets a key
    kvbudget does not model."""
    if attention_config is None:
        return "auto"
    try:
        data = json.loads(attention_config)
    except json.JSONDecodeError as exc:
        raise _refuse(
            f"{attention_config!r} is not JSON ({exc.msg}); write it as vLLM takes it, e.g. "
            '\'{"indexer_kv_dtype": "fp8"}\''
        ) from exc
    if not isinstance(data, dict):
        raise _refuse('must be a JSON object, e.g. \'{"indexer_kv_dtype": "fp8"}\'')
    other = sorted(str(k) for k in data if k != "indexer_kv_dtype")
    if other:
        raise _refuse(
            f"{', '.join(other)} not modelled (kvbudget reads indexer_kv_dtype only); leave "
            "it out of the plan, or measure"
        )
    value = data.get("indexer_kv_dtype", "auto")
    if value not in INDEXER_KV_DTYPES:
        raise _refuse(
            f"indexer_kv_dtype {value!r}; vLLM 0.32 takes {', '.join(INDEXER_KV_DTYPES)} "
            "(config/attention.py line 13)"
        )
    return cast(IndexerKvDtype, value)
