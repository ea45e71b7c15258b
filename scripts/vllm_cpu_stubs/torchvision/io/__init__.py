"""Names transformers' image_utils imports when it sees torchvision (never called here)."""

import enum
from typing import Any


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    RGB = 3


def decode_image(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("torchvision import stub (scripts/vllm_cpu_stubs)")
