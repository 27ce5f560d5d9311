"""``moe``: a gated mixture of expert MLPs on pooled hidden states, L1 loss.

A shared projection maps the input to ``hidden`` units; a softmax gate on it weights ``n_experts``
small expert MLPs, and the prediction is the gate-weighted sum of their outputs. A load-balancing
term (``balance`` * E * sum_e mean_gate_e^2, which is smallest when every expert gets 1/E of the
batch) keeps the gate from collapsing onto one expert. Targets as in ``mlp``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lenpred.predictors.base import check_param
from lenpred.predictors.mlp import TorchRegressor


class MoENet(nn.Module):
    def __init__(self, d_x: int, hidden: int, n_experts: int, expert_hidden: int, dropout: float) -> None:
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(d_x, hidden), nn.GELU(), nn.Dropout(dropout))
        self.gate = nn.Linear(hidden, n_experts)
        self.experts = nn.ModuleList([
            nn.Sequential(nn.Linear(hidden, expert_hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(expert_hidden, 1))
            for _ in range(n_experts)
        ])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.proj(x)  # (B, H)
        g = torch.softmax(self.gate(h), dim=-1)  # (B, E)
        y = torch.cat([e(h) for e in self.experts], dim=-1)  # (B, E)
        return (g * y).sum(-1), g  # (B,), (B, E)


@dataclass(eq=False, repr=False)
class MoEHead(TorchRegressor):
    name = "moe"
    default_blocks = ("@mid.mean", "@high.last")

    blocks: tuple[str, ...] | None = None
    hidden: int = 256
    n_experts: int = 4
    expert_hidden: int = 64
    balance: float = 0.01
    dropout: float = 0.1
    target: str = "median"

    def _check_params(self) -> None:
        self._check_common()
        check_param(isinstance(self.n_experts, int) and self.n_experts >= 1, self.name, "n_experts", "must be >= 1")
        check_param(isinstance(self.expert_hidden, int) and self.expert_hidden >= 1, self.name, "expert_hidden", "must be >= 1")
        check_param(float(self.balance) >= 0, self.name, "balance", "must be >= 0")

    def _build(self, d_x: int, d_c: int) -> nn.Module:
        return MoENet(d_x, self.hidden, self.n_experts, self.expert_hidden, float(self.dropout))

    def _forward(self, xb: torch.Tensor, cb: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        out, g = self.net_(xb)
        aux = float(self.balance) * self.n_experts * (g.mean(0) ** 2).sum() if self.net_.training else None
        return out, aux
