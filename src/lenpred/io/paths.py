"""Where lenpred keeps its caches (converted models, recovered datasets).

``LENPRED_HOME`` overrides the default ``~/.cache/lenpred``.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    p = Path(os.environ.get("LENPRED_HOME") or Path.home() / ".cache" / "lenpred")
    p.mkdir(parents=True, exist_ok=True)
    return p
