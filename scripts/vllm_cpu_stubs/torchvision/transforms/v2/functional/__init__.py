"""Any name is a function that raises if called (transformers imports a few at load)."""

from typing import Any


def __getattr__(name: str) -> Any:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"torchvision import stub: {name}")

    return missing
