"""``egtp``: entropy-guided token pooling + a soft-label head.

The prompt's hidden states are pooled with weights softmax(next-token entropies) over its positions
(the ``<layer>.entropy`` blocks, computed by ``lenpred features``): positions where the target model
is uncertain about what comes next say the most about how the answer will unfold. The pooled last
layer and the entropy statistics among the side features feed the soft-label head of ``softlabel``
(histogram targets, median of the predicted distribution as the point).
"""

from __future__ import annotations

from lenpred.predictors.softlabel import SoftLabelHead


class EGTPHead(SoftLabelHead):
    """The soft-label head (same hyperparameters, inherited constructor) on entropy-pooled states."""

    name = "egtp"
    default_blocks = ("@high.entropy", "side")
