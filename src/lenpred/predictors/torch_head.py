"""The base of the heads trained by gradient descent (:func:`lenpred.predictors.nn.train_loop`).

:class:`TorchHead` holds the training hyperparameters every such head takes -- ``epochs``, ``batch_size``,
``lr``, ``weight_decay``, ``patience``, ``seed`` -- as dataclass fields. They are keyword-only, so the
generated constructor lists them after the head's own fields (its blocks, its network's size, its
loss) and ``get_params`` reads the constructor's signature as for any head. A subclass declares its own
fields the same way (``@dataclass(eq=False, repr=False)``) and may redeclare a training field to change
its default. The class also checks the network's size and the training values, trains the network
under the head's seed, and rebuilds a saved network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from lenpred.predictors.base import Predictor, check_param
from lenpred.predictors.nn import TrainSettings, load_module, seeded, train_loop

__all__ = ["TorchHead"]


@dataclass(eq=False, repr=False, kw_only=True)
class TorchHead(Predictor):
    """A head whose network :func:`~lenpred.predictors.nn.train_loop` trains (see the module docstring)."""

    epochs: int = 200
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 1e-4
    patience: int = 20
    seed: int = 0

    def _check_net(self) -> None:
        """``hidden``, the training counts, ``depth`` (when the head has one), ``dropout``, ``lr`` and
        ``weight_decay``: each refused with a one-line error naming it."""
        n = self.name
        for k in ("hidden", "epochs", "batch_size", "patience"):
            v = getattr(self, k)
            check_param(isinstance(v, int) and v >= 1, n, k, "must be an integer >= 1")
        if "depth" in self.param_names():
            check_param(isinstance(self.depth, int) and self.depth >= 0, n, "depth", "must be an integer >= 0")
        check_param(0.0 <= float(self.dropout) < 1.0, n, "dropout", "must be in [0, 1)")
        check_param(float(self.lr) > 0 and float(self.weight_decay) >= 0, n, "lr", "must be > 0 (weight_decay >= 0)")

    def train_settings(self) -> TrainSettings:
        """The six training fields, as :func:`~lenpred.predictors.nn.train_loop` reads them."""
        return TrainSettings(epochs=self.epochs, batch_size=self.batch_size, lr=float(self.lr),
                             weight_decay=float(self.weight_decay), patience=self.patience, seed=self.seed)

    def _train_net(self, build: Callable[[], nn.Module], loss_of: Callable[..., Any], n_rows: int,
                   val_mae: Callable[[], float] | None) -> None:
        """``net_ = build()`` under the head's seed, trained on ``n_rows`` rows; its log in ``train_log_``."""
        with seeded(self.seed):
            self.net_ = build()
            log = train_loop(self.net_, loss_of, n_rows, self.train_settings(), val_mae=val_mae)
        self.train_log_ = log.__dict__

    def _load_net(self, build: Callable[[], nn.Module], tensors: dict[str, np.ndarray]) -> None:
        """``net_`` rebuilt and loaded from saved tensors (seeded: the caller's RNG stays untouched)."""
        with seeded(self.seed):
            self.net_ = build()
        load_module(self.net_, tensors)
