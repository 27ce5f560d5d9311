"""The training-time-test loss of an EAGLE-3 head (see :mod:`lenpred.draft.train` for the recipe).

Soft cross-entropy of the head unrolled ``ttt_steps`` times against the target's next-token
distribution restricted to the draft vocabulary and renormalised (from the state cache's top-K), at
response positions only; step i's loss weighs ``step_decay ** i`` (:class:`TTTLoss`).

**Hard labels** (:class:`HardTTTLoss`, for a cache made with ``--labels hard``): the same unroll,
positions and weights, with the cross-entropy against the run's own next sampled token instead of the
target's distribution: column t of step i predicts x_{t+i+2}; past the last response token that is the
end-of-sequence id when the sample stopped there (and was not cut to ``max_seq_len``), otherwise
nothing. Positions whose token lies outside the draft vocabulary are skipped (soft labels are
restricted to it too); top-1 agreement is counted against the sampled token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lenpred.draft.states import SampleStates
from lenpred.draft.train_config import DraftTrainConfig

__all__ = ["HardTTTLoss", "LossModule", "TTTLoss", "make_loss"]

_Step = tuple[torch.Tensor, float, int] | None  # (loss of the step, top-1 agreement, positions); None: no position


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
        outs = self._unroll(samples)
        total = torch.zeros((), device=self.dev)
        losses, accs, counts = [], [], []
        for i, o in enumerate(outs):
            got = self._step(i, o, samples)
            if got is None:
                losses.append(0.0)
                accs.append(0.0)
                counts.append(0)
                continue
            loss_i, acc, n = got
            total = total + (self.cfg.step_decay ** i) * loss_i
            losses.append(float(loss_i.detach()))
            accs.append(acc)
            counts.append(n)
        return total, losses, accs, counts

    def _unroll(self, samples: list[SampleStates]) -> list[torch.Tensor]:
        """The head unrolled ``ttt_steps`` times over the batch: each step's o, (B, T, d)."""
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
        return self.model.ttt(aux, tok, self.cfg.ttt_steps)  # each (B, T, d)

    def _step(self, i: int, o: torch.Tensor, samples: list[SampleStates]) -> _Step:
        """Step ``i``'s soft cross-entropy against the cached top-K, restricted to the draft vocabulary."""
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
            return None
        b_t = torch.from_numpy(np.concatenate(bi)).to(self.dev)
        t_t = torch.from_numpy(np.concatenate(ti)).to(self.dev)
        dids = self.tmap[torch.from_numpy(np.concatenate(ids).astype(np.int64)).to(self.dev)]  # (n, K) draft ids / -1
        lp = torch.from_numpy(np.concatenate(logp).astype(np.float32)).to(self.dev)  # (n, K)
        inv = dids >= 0
        keep = inv.any(dim=1)
        if self.cfg.mask_out_of_vocab:
            keep &= inv[:, 0]  # the target's argmax (column 0) must be a draft token
        if not bool(keep.any()):
            return None
        dids, lp, inv = dids[keep], lp[keep], inv[keep]
        p = torch.softmax(lp.masked_fill(~inv, float("-inf")), dim=-1)  # (n, K) renormalised on the draft vocab
        logq = torch.log_softmax(self.model.logits(o[b_t[keep], t_t[keep]]), dim=-1)  # (n, N_draft)
        ll = torch.gather(logq, 1, dids.clamp(min=0)) * inv  # (n, K)
        loss_i = -(p * ll).sum(1).mean()
        top = dids[torch.arange(len(dids)), torch.argmax(lp.masked_fill(~inv, float("-inf")), dim=1)]
        return loss_i, float((torch.argmax(logq, dim=1) == top).float().mean()), int(keep.sum())


class HardTTTLoss(TTTLoss):
    """Cross-entropy of the unrolled head against the run's own next sampled tokens (a hard-label cache).

    ``eos_id``: the label after the last response token of a sample that stopped at end-of-sequence
    (the run's token ids do not hold it)."""

    def __init__(self, model: Any, cfg: DraftTrainConfig, vocab_size: int, eos_id: int) -> None:
        super().__init__(model, cfg, vocab_size)
        self.eos_id = int(eos_id)

    def next_tokens(self, s: SampleStates, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Step ``i``'s columns t of sample ``s`` and the target id each predicts, x_{t+i+2} (-1: none)."""
        n, npr = len(s.tokens), s.n_prompt
        t = np.arange(max(npr - 1, 0), n - i - 1)  # columns whose position s = t+i+1 is a response token
        nxt = np.full(t.size, -1, np.int64)
        inside = t + i + 2 < n
        nxt[inside] = s.tokens[t[inside] + i + 2]
        # past the last token: EOS if the sample ended with it (a sample cut to max_seq_len did not end there)
        if s.stop_reason == "eos" and n < self.cfg.max_seq_len:
            nxt[~inside] = self.eos_id
        return t, nxt

    def _step(self, i: int, o: torch.Tensor, samples: list[SampleStates]) -> _Step:
        bi, ti, lab = [], [], []
        for b, s in enumerate(samples):
            t, nxt = self.next_tokens(s, i)
            if t.size == 0:
                continue
            bi.append(np.full(t.size, b))
            ti.append(t)
            lab.append(nxt)
        if not bi:
            return None
        b_t = torch.from_numpy(np.concatenate(bi)).to(self.dev)
        t_t = torch.from_numpy(np.concatenate(ti)).to(self.dev)
        tid = torch.from_numpy(np.concatenate(lab)).to(self.dev)  # (n,) target ids / -1
        did = torch.where(tid >= 0, self.tmap[tid.clamp(min=0)], -1)  # (n,) draft ids / -1 (outside the vocabulary)
        keep = did >= 0
        if not bool(keep.any()):
            return None
        did = did[keep]
        logq = torch.log_softmax(self.model.logits(o[b_t[keep], t_t[keep]]), dim=-1)  # (n, N_draft)
        loss_i = -logq.gather(1, did[:, None]).mean()
        return loss_i, float((torch.argmax(logq, dim=1) == did).float().mean()), int(keep.sum())


def make_loss(model: Any, cfg: DraftTrainConfig, vocab_size: int, labels: str, eos_id: int) -> TTTLoss:
    """The loss for a state cache's ``labels``: soft (:class:`TTTLoss`) or hard (:class:`HardTTTLoss`)."""
    return HardTTTLoss(model, cfg, vocab_size, eos_id) if labels == "hard" else TTTLoss(model, cfg, vocab_size)


class LossModule(torch.nn.Module):
    """The head with its loss as ``forward``, so DistributedDataParallel sees every use of the weights."""

    def __init__(self, model: Any, loss: TTTLoss) -> None:
        super().__init__()
        self.model = model
        self._loss = loss

    def forward(self, samples: list[SampleStates]) -> tuple[torch.Tensor, list[float], list[float], list[int]]:
        return self._loss(samples)
