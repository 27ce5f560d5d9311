"""`lenpred model NAME`: resolve a model, convert the embedded GGUF once, print its fingerprint."""

from __future__ import annotations

import argparse
import json

from lenpred.models.loading import EMBEDDED, hf_folder


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", default=EMBEDDED, help=f"model name or path (default {EMBEDDED})")


def run(a: argparse.Namespace) -> int:
    spec, folder = hf_folder(a.name)
    print(
        json.dumps(
            {
                "id": spec.id,
                "fingerprint": spec.fingerprint,
                "hf_folder": str(folder),
                "gguf": str(spec.gguf_path) if spec.gguf_path else None,
                "upstream": spec.upstream,
            },
            indent=2,
        )
    )
    return 0
