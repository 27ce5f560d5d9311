"""A run card's identity: the fields that say what made a run, and their hash (what every artifact records)."""

from __future__ import annotations

import hashlib
from typing import Any

from lenpred.io.fileio import canonical_json

__all__ = ["IDENTITY_KEYS", "card_hash"]

IDENTITY_KEYS = ("schema", "model", "prompts", "sampling", "engine")


def card_hash(card: dict[str, Any]) -> str:
    """Hash of the identity part of a card (16 hex chars). Bookkeeping fields do not change it."""
    ident = {k: card.get(k) for k in IDENTITY_KEYS}
    return hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:16]
