"""``film``: an MLP on pooled hidden states whose hidden features are modulated by the side features.

Each hidden layer computes h = (1 + gamma(c)) * (W h_prev) + beta(c) before its nonlinearity (FiLM,
Perez et al. 2018), with gamma, beta produced from the side features c (prompt length, entropy
statistics) by a small conditioning network whose last layer starts at zero -- the head starts as a
plain MLP and learns how much the side features should rescale and shift each hidden unit. L1 loss,
targets as in ``mlp``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lenpred.predictors.base import check_param
from lenpred.predictors.mlp import TorchRegressor


class FiLMNet(nn.Module):
    def __init__(self, d_x: int, d_c: int, hidden: int, depth: int, cond_hidden: int, dropout: float) -> None:
        super().__init__()
        self.depth, self.hidden = depth, hidden
        self.layers = nn.ModuleList([nn.Linear(d_x if i == 0 else hidden, hidden) for i in range(depth)])
        self.cond = nn.Sequential(nn.Linear(d_c, cond_hidden), nn.GELU(), nn.Linear(cond_hidden, 2 * depth * hidden))
        nn.init.zeros_(self.cond[-1].weight)  # gamma = beta = 0 at the start: an unmodulated MLP
        nn.init.zeros_(self.cond[-1].bias)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        gb = self.cond(c).view(-1, self.depth, 2, self.hidden)  # (B, depth, 2, H)
        h = x  # (B, d_x)
        for i, lin in enumerate(self.layers):
            h = (1.0 + gb[:, i, 0]) * lin(h) + gb[:, i, 1]  # (B, H)
            h = self.drop(nn.functional.gelu(h))
        return self.out(h)[:, 0]  # (B,)


@dataclass(eq=False, repr=False)
class FiLMHead(TorchRegressor):
    name = "film"
    default_blocks = ("@mid.mean", "@high.last")

    blocks: tuple[str, ...] | None = None
    cond: tuple[str, ...] = ("side",)  # the conditioning blocks (default: every side feature)
    hidden: int = 256
    depth: int = 2
    cond_hidden: int = 64
    dropout: float = 0.1
    target: str = "median"

    def _check_params(self) -> None:
        self._check_common()
        check_param(self.depth >= 1, self.name, "depth", "must be >= 1 (FiLM modulates hidden layers)")
        check_param(len(self.cond) >= 1, self.name, "cond", "must name at least one block")
        check_param(isinstance(self.cond_hidden, int) and self.cond_hidden >= 1, self.name, "cond_hidden", "must be >= 1")

    def _groups(self) -> dict[str, tuple[str, ...]]:
        return {"x": tuple(self.default_blocks if self.blocks is None else self.blocks), "c": tuple(self.cond)}

    def _build(self, d_x: int, d_c: int) -> nn.Module:
        return FiLMNet(d_x, d_c, self.hidden, self.depth, self.cond_hidden, float(self.dropout))

    def _forward(self, xb: torch.Tensor, cb: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert cb is not None
        return self.net_(xb, cb), None
