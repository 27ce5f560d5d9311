"""The training-time-test loss of an EAGLE-3 head (see :mod:`lenpred.draft.train` for the recipe).

Soft cross-entropy of the head unrolled ``ttt_steps`` times against the target's next-token
distribution restricted to the draft vocabulary and renormalised (from the state cache's top-K), at
response positions only; step i's loss weighs ``step_decay ** i``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lenpred.draft.states import SampleStates
from lenpred.draft.train_config import DraftTrainConfig

__all__ = ["LossModule", "TTTLoss"]


class TTTLoss:
    """Soft cross-entropy of the unrolled head against the cached target labels."""

    def __init__(self, model: Any, cfg: DraftTrainConfig, vocab_size: int) -> None:
        self.model = model
        self.cfg = cfg
        t2d = model.t2d.cpu()
        tmap = torch.full((vocab_size,), -1, dtype=torch.long)
        tmap[model.draft_ids_to_target.cpu()] = torch.arange(int(t2d.sum()))
        self.dev = model.fc.weight.device
        self.tmap = tmap.to(self.dev)  # target id -> draft id, or -1

    def __call__(self, samples: list[SampleStates]) -> tuple[torch.Tensor, list[float], list[float], list[int]]:
        """(weighted loss, per-step loss, per-step top-1 agreement, per-step positions)."""
        B = len(samples)
        T = max(len(s.tokens) for s in samples)
        d3 = samples[0].aux.shape[1]
        aux = torch.zeros((B, T, d3))  # assembled on the CPU, moved once
        tok = torch.zeros((B, T), dtype=torch.long)
        for b, s in enumerate(samples):
            n = len(s.tokens)
            aux[b, :n] = torch.from_numpy(s.aux.astype(np.float32))
            tok[b, :n] = torch.from_numpy(s.tokens.astype(np.int64))
        aux, tok = aux.to(self.dev), tok.to(self.dev)
        outs = self.model.ttt(aux, tok, self.cfg.ttt_steps)  # each (B, T, d)
        total = torch.zeros((), device=self.dev)
        losses, accs, counts = [], [], []
        for i, o in enumerate(outs):
            bi, ti, ids, logp = [], [], [], []
            for b, s in enumerate(samples):
                n, npr = len(s.tokens), s.n_prompt
                t = np.arange(max(npr - 1, 0), n - i - 1)  # columns whose target s = t+i+1 exists
                if t.size == 0:
                    continue
                rows = t + i + 1 - npr  # label rows (s - n_prompt)
                bi.append(np.full(t.size, b))
                ti.append(t)
                ids.append(s.topk_ids[rows])
                logp.append(s.topk_logp[rows])
            if not bi:
                losses.append(0.0)
                accs.append(0.0)
                counts.append(0)
                continue
            b_t = torch.from_numpy(np.concatenate(bi)).to(self.dev)
            t_t = torch.from_numpy(np.concatenate(ti)).to(self.dev)
            dids = self.tmap[torch.from_numpy(np.concatenate(ids).astype(np.int64)).to(self.dev)]  # (n, K) draft ids / -1
            lp = torch.from_numpy(np.concatenate(logp).astype(np.float32)).to(self.dev)  # (n, K)
            inv = dids >= 0
            keep = inv.any(dim=1)
            if self.cfg.mask_out_of_vocab:
                keep &= inv[:, 0]  # the target's argmax (column 0) must be a draft token
            if not bool(keep.any()):
                losses.append(0.0)
                accs.append(0.0)
                counts.append(0)
                continue
            dids, lp, inv = dids[keep], lp[keep], inv[keep]
            p = torch.softmax(lp.masked_fill(~inv, float("-inf")), dim=-1)  # (n, K) renormalised on the draft vocab
            logq = torch.log_softmax(self.model.logits(o[b_t[keep], t_t[keep]]), dim=-1)  # (n, N_draft)
            ll = torch.gather(logq, 1, dids.clamp(min=0)) * inv  # (n, K)
            loss_i = -(p * ll).sum(1).mean()
            total = total + (self.cfg.step_decay ** i) * loss_i
            losses.append(float(loss_i.detach()))
            top = dids[torch.arange(len(dids)), torch.argmax(lp.masked_fill(~inv, float("-inf")), dim=1)]
            accs.append(float((torch.argmax(logq, dim=1) == top).float().mean()))
            counts.append(int(keep.sum()))
        return total, losses, accs, counts


class LossModule(torch.nn.Module):
    """The head with its loss as ``forward``, so DistributedDataParallel sees every use of the weights."""

    def __init__(self, model: Any, loss: TTTLoss) -> None:
        super().__init__()
        self.model = model
        self._loss = loss

    def forward(self, samples: list[SampleStates]) -> tuple[torch.Tensor, list[float], list[float], list[int]]:
        return self._loss(samples)
