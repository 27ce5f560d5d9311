"""Features of prompts and trajectories for length predictors (prefill states, pooling, entropies).

* :mod:`~lenpred.features.store` -- the features artifact predictors read (:class:`Features`);
* :mod:`~lenpred.features.pooling` -- last / mean / entropy-guided pooling, chunked next-token entropies;
* :mod:`~lenpred.features.prefill` -- :class:`FeatureConfig` and the batched :class:`Extractor`;
* :mod:`~lenpred.features.build` -- :func:`compute_features` for a run (resumable, one shard of N);
* :mod:`~lenpred.features.shards` -- the ``--shard I/N`` partition and :func:`merge_features`.
"""

from lenpred.features.build import FeatureRun, compute_features
from lenpred.features.prefill import FeatureConfig
from lenpred.features.shards import merge_features
from lenpred.features.store import Features, load_features, save_features, spec_key

__all__ = [
    "Features", "load_features", "save_features", "spec_key", "FeatureConfig", "compute_features",
    "FeatureRun", "merge_features",
]
