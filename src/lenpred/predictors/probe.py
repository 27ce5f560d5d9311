"""``probe``: a TRAIL-style probe -- one layer about a third of the way up, equal-width length bins.

Following TRAIL (Shahout et al., "Don't Stop Me Now: Embedding Based Scheduling for LLMs"): the
prompt's mean-pooled hidden state at a layer about a third of the way up the target model (layer 10
of SmolLM2-135M's 30), a small MLP classifier over ``n_bins`` equal-width length bins trained with
cross-entropy on each sample's bin (hard labels: the prompt's histogram without smoothing), and the
point prediction the expected value over the bin midpoints (``point="mean"``). The bin histogram is
its predictive distribution (quantiles from it).
"""

from __future__ import annotations

from lenpred.predictors.softlabel import BinnedHead


class ProbeHead(BinnedHead):
    name = "probe"
    default_blocks = ("@low.mean",)

    def __init__(self, blocks: tuple[str, ...] | None = None, n_bins: int = 10, target: str = "histogram",
                 smoothing: float = 0.0, point: str = "mean", hidden: int = 128, depth: int = 1, dropout: float = 0.1,
                 epochs: int = 200, batch_size: int = 128, lr: float = 1e-3, weight_decay: float = 1e-4,
                 patience: int = 20, seed: int = 0) -> None:
        self.blocks = blocks
        self.n_bins = n_bins
        self.target = target
        self.smoothing = smoothing
        self.point = point
        self.hidden = hidden
        self.depth = depth
        self.dropout = dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.patience = patience
        self.seed = seed
