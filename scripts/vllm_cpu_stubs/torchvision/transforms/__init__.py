"""``InterpolationMode`` (vLLM's MiniMax-M3 processor, transformers' image_utils); any other name
is a function that raises if called."""

import enum
from typing import Any


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def __getattr__(name: str) -> Any:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"torchvision import stub: {name}")

    return missing
