"""``probe``: a TRAIL-style probe -- one layer about a third of the way up, equal-width length bins.

Following TRAIL (Shahout et al., "Don't Stop Me Now: Embedding Based Scheduling for LLMs"): the
prompt's mean-pooled hidden state at a layer about a third of the way up the target model (layer 10
of SmolLM2-135M's 30), a small MLP classifier over ``n_bins`` equal-width length bins trained with
cross-entropy on each sample's bin (hard labels: the prompt's histogram without smoothing), and the
point prediction the expected value over the bin midpoints (``point="mean"``). The bin histogram is
its predictive distribution (quantiles from it).
"""

from __future__ import annotations

from dataclasses import dataclass

from lenpred.predictors.softlabel import BinnedHead


@dataclass(eq=False, repr=False)
class ProbeHead(BinnedHead):
    name = "probe"
    default_blocks = ("@low.mean",)

    blocks: tuple[str, ...] | None = None
    n_bins: int = 10
    target: str = "histogram"
    smoothing: float = 0.0
    point: str = "mean"
    hidden: int = 128
    depth: int = 1
    dropout: float = 0.1

