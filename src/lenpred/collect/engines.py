"""Import every engine module so that each registers itself in :data:`ENGINES`.

Engines with optional dependencies import them lazily, so this module is cheap and safe.
"""

from lenpred.collect import (
    hf,  # noqa: F401
    llamacpp,  # noqa: F401
    openai_engine,  # noqa: F401
)
from lenpred.collect.base import ENGINES

__all__ = ["ENGINES"]
