"""``egtp``: entropy-guided token pooling + a soft-label head.

The prompt's hidden states are pooled with weights softmax(next-token entropies) over its positions
(the ``<layer>.entropy`` blocks, computed by ``lenpred features``): positions where the target model
is uncertain about what comes next say the most about how the answer will unfold. The pooled last
layer and the entropy statistics among the side features feed the soft-label head of ``softlabel``
(histogram targets, median of the predicted distribution as the point).
"""

from __future__ import annotations

from lenpred.predictors.softlabel import BinnedHead


class EGTPHead(BinnedHead):
    name = "egtp"
    default_blocks = ("@high.entropy", "side")

    def __init__(self, blocks: tuple[str, ...] | None = None, n_bins: int = 32, target: str = "histogram",
                 smoothing: float = 1.0, point: str = "median", hidden: int = 256, depth: int = 2, dropout: float = 0.1,
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
