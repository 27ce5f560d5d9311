"""Features of prompts and trajectories for length predictors (prefill states, pooling, entropies)."""

from lenpred.features.store import Features, load_features, save_features

__all__ = ["Features", "load_features", "save_features"]
