"""Every head by name, for the commands that make, read or name heads (train, predict, bench, serve,
route, demo): the predictor registry of :mod:`lenpred.predictors` filled with the OUTLETS trajectory head.

:mod:`lenpred.outlets.head` adds itself to :data:`lenpred.predictors.registry.PREDICTORS` when imported
(:mod:`lenpred.predictors` does not import :mod:`lenpred.outlets`, a package above it); the command layer,
above both, imports it, so a saved OUTLETS head is known wherever a command reads a head (and is refused
there with its own words: it reads trajectory rows, not a prompt).
"""

from __future__ import annotations

__all__ = ["register_heads"]


def register_heads() -> None:
    """Put every package's heads in the predictor registry (idempotent)."""
    import lenpred.outlets.head  # noqa: F401 - adds "outlets" to the predictor registry
