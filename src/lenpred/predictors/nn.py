"""Shared pieces of the torch heads: seeding, standardisation, the MLP trunk, one training loop.

Every torch head is small (a few hundred thousand parameters at most) and trains on CPU in seconds:
minibatch AdamW, an early stop on the validation prompts' MAE in tokens with the best weights
restored, and all randomness (initialisation, dropout, batch order) drawn from ``seed`` inside
``torch.random.fork_rng`` so that training never disturbs, nor depends on, the caller's global RNG.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from lenpred.errors import DataError

__all__ = ["seeded", "one_thread", "Standardizer", "LogScale", "mlp", "train_loop", "TrainSettings", "TrainLog",
           "module_tensors", "load_module"]


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run a block on one intra-op thread. These networks are far too small to gain from more, and
    on a machine whose cores are busy (a background collection) two threads were 20x slower than
    one (spinning workers); one thread also makes results independent of the core count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block with torch's CPU RNG seeded (restoring the caller's RNG state afterwards), on one thread."""
    with torch.random.fork_rng(devices=[]), one_thread():
        torch.manual_seed(int(seed))
        yield


@dataclass
class Standardizer:
    """Column-wise (x - mean) / scale with statistics of the training rows (constant columns: scale 1)."""

    mean: np.ndarray  # (d,) float32
    scale: np.ndarray  # (d,) float32

    @classmethod
    def fit(cls, x: np.ndarray) -> Standardizer:
        m = x.mean(axis=0, dtype=np.float64)
        s = x.std(axis=0, dtype=np.float64)
        return cls(m.astype(np.float32), np.where(s > 1e-8, s, 1.0).astype(np.float32))

    def __call__(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(((x - self.mean) / self.scale).astype(np.float32))


@dataclass
class LogScale:
    """Target transform z = (log1p(y) - mu) / sd. Monotone, so an L1 fit in z still estimates the
    median in tokens (the median commutes with monotone maps), with far better conditioning."""

    mu: float
    sd: float
    log: bool = True

    @classmethod
    def fit(cls, y: np.ndarray, log: bool = True) -> LogScale:
        t = np.log1p(y) if log else np.asarray(y, dtype=np.float64)
        return cls(float(t.mean()), float(max(t.std(), 1e-6)), log)

    def forward(self, y: np.ndarray) -> np.ndarray:
        t = np.log1p(y) if self.log else np.asarray(y, dtype=np.float64)
        return (t - self.mu) / self.sd

    def inverse(self, z: np.ndarray) -> np.ndarray:
        t = np.asarray(z, dtype=np.float64) * self.sd + self.mu
        return np.expm1(np.minimum(t, 30.0)) if self.log else t

    def to_json(self) -> dict[str, Any]:
        return {"mu": self.mu, "sd": self.sd, "log": self.log}


def mlp(d_in: int, hidden: int, depth: int, d_out: int, dropout: float) -> nn.Sequential:
    """``depth`` hidden layers of width ``hidden`` (GELU, dropout), then a linear output."""
    layers: list[nn.Module] = []
    d = d_in
    for _ in range(depth):
        layers += [nn.Linear(d, hidden), nn.GELU(), nn.Dropout(dropout)]
        d = hidden
    layers.append(nn.Linear(d, d_out))
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class TrainSettings:
    """How :func:`train_loop` trains: AdamW's ``lr`` and ``weight_decay``, ``epochs`` of ``batch_size`` rows,
    an early stop after ``patience`` epochs without a better validation MAE, the batch order drawn from ``seed``."""

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    patience: int
    seed: int


@dataclass(frozen=True)
class TrainLog:
    epochs_run: int
    best_epoch: int
    best_val: float | None  # validation MAE (tokens) at the kept weights; None without validation
    final_loss: float


def train_loop(
    net: nn.Module,
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    n_rows: int,
    settings: TrainSettings,
    *,
    val_mae: Callable[[], float] | None,
) -> TrainLog:
    """Minibatch AdamW over ``n_rows`` training rows; ``loss_of(idx)`` is the loss of rows ``idx``.

    With ``val_mae``, stop after ``settings.patience`` epochs without a better validation MAE and restore
    the best weights; without it, train all ``settings.epochs``.
    """
    epochs, batch_size, patience = settings.epochs, settings.batch_size, settings.patience
    gen = torch.Generator().manual_seed(int(settings.seed) + 1)
    opt = torch.optim.AdamW(net.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    best, best_epoch, best_state, since = float("inf"), 0, None, 0
    last = float("nan")
    epoch = 0
    for epoch in range(1, epochs + 1):
        net.train()
        perm = torch.randperm(n_rows, generator=gen)
        total = 0.0
        for start in range(0, n_rows, batch_size):
            idx = perm[start:start + batch_size]
            loss = loss_of(idx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        last = total / n_rows
        if not np.isfinite(last):
            raise DataError(f"training diverged at epoch {epoch} (loss {last})", "lower --param lr=... or check the inputs")
        if val_mae is not None:
            net.eval()
            with torch.no_grad():
                v = float(val_mae())
            if v < best - 1e-9:
                best, best_epoch, since = v, epoch, 0
                best_state = copy.deepcopy(net.state_dict())
            else:
                since += 1
                if since >= patience:
                    break
    if best_state is not None:
        net.load_state_dict(best_state)
    net.eval()
    return TrainLog(epoch, best_epoch if val_mae is not None else epoch, best if val_mae is not None else None, last)


def module_tensors(net: nn.Module, prefix: str = "net.") -> dict[str, np.ndarray]:
    return {prefix + k: v.detach().cpu().numpy().copy() for k, v in net.state_dict().items()}


def load_module(net: nn.Module, tensors: dict[str, np.ndarray], prefix: str = "net.") -> nn.Module:
    """Load ``prefix``-named tensors into ``net`` strictly (missing or unexpected keys are errors)."""
    sd = {k[len(prefix):]: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items() if k.startswith(prefix)}
    try:
        net.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise DataError(f"head weights do not fit the network ({str(e).splitlines()[0]})",
                        "the head file is corrupt or of another version: retrain it") from None
    net.eval()
    return net
