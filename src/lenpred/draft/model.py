"""The EAGLE-3 draft head as a torch module, with the released state-dict names.

What it computes (EAGLE-3, "training-time test" form; names as in the released checkpoints)::

    g_t   = fc([a_t ; b_t ; c_t])                      3 target layers (low, mid, high) -> d
    u_t   = [input_layernorm(E x_{t+1}) ; hidden_norm(g_t)]   (2d) -- E: the target's embeddings
    h_t   = g_t + o_proj(attn(q/k/v_proj(u_t)))          the fused state is the residual
    o_t   = h_t + mlp(post_attention_layernorm(h_t))     "the draft hidden state"
    logits over the draft vocabulary = lm_head(norm(o_t)); draft id d is target id d + d2t[d]

Position ``t`` reads the target's state *at* token ``x_t`` and the embedding of the *next* token
``x_{t+1}`` and predicts ``x_{t+2}``. For the following chain steps the draft reads its own ``o``
in place of ``g`` (with the token it proposed), at position ``t + 1``, ``t + 2``, ... -- attending to
the real positions ``<= t`` and to its own earlier chain steps only.

State dict (exactly the released keys; the embeddings are the target's, frozen, never saved)::

    fc.weight                                 (d, 3 d_target)
    midlayer.self_attn.q_proj.weight          (H hd, 2d)     k_proj / v_proj: (H_kv hd, 2d)
    midlayer.self_attn.o_proj.weight          (d, H hd)
    midlayer.mlp.gate_proj.weight / up_proj   (I, d)         down_proj: (d, I)
    midlayer.hidden_norm.weight, midlayer.input_layernorm.weight,
    midlayer.post_attention_layernorm.weight, norm.weight     (d,)
    lm_head.weight                            (N_draft, d)
    d2t                                       (N_draft,) int64   offsets: target id = d + d2t[d]
    t2d                                       (V,) bool          which target ids are in the draft vocabulary

Rotary embeddings use ``rope_theta`` from the head's config (10000 when the config names none, as
in the release), on positions of the sequence being decoded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lenpred.draft.config import DraftConfig

__all__ = ["DraftKV", "Eagle3Draft", "expected_state_shapes"]


class RMSNorm(nn.Module):
    """Llama's RMSNorm (normalise in float32, scale in the input dtype)."""

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def _rope(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (B, 1, T, hd) for integer positions (B, T) (Llama's half-rotation layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32)[..., None] * inv  # (B, T, hd/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (B, T, hd)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


@dataclass
class DraftKV:
    """The draft layer's key/value cache: (B, H_kv, S, hd) each, positions 0..S-1 of the sequence."""

    k: torch.Tensor
    v: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.k.shape[2])

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions (drop speculative chain entries after a verification)."""
        self.k = self.k[:, :, :n]
        self.v = self.v[:, :, :n]


class Attention(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        d, H, Hkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.H, self.Hkv, self.hd, self.theta = H, Hkv, hd, cfg.rope_theta
        self.q_proj = nn.Linear(2 * d, H * hd, bias=False)
        self.k_proj = nn.Linear(2 * d, Hkv * hd, bias=False)
        self.v_proj = nn.Linear(2 * d, Hkv * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, d, bias=False)

    def _qkv(self, u: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, _ = u.shape
        q = self.q_proj(u).view(B, T, self.H, self.hd).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_proj(u).view(B, T, self.Hkv, self.hd).transpose(1, 2)  # (B, Hkv, T, hd)
        v = self.v_proj(u).view(B, T, self.Hkv, self.hd).transpose(1, 2)  # (B, Hkv, T, hd)
        cos, sin = _rope(positions, self.hd, self.theta, q.dtype)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def _rep(self, x: torch.Tensor) -> torch.Tensor:
        """(B, Hkv, S, hd) -> (B, H, S, hd): grouped-query heads share a key/value head."""
        n = self.H // self.Hkv
        return x if n == 1 else x.repeat_interleave(n, dim=1)

    def _out(self, o: torch.Tensor) -> torch.Tensor:
        B, _, T, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.H * self.hd))  # (B, T, d)

    def forward_cached(self, u: torch.Tensor, positions: torch.Tensor, kv: DraftKV | None) -> tuple[torch.Tensor, DraftKV]:
        """Decoding: T new positions after the S cached ones, causal. u: (B, T, 2d)."""
        q, k, v = self._qkv(u, positions)
        if kv is not None and kv.length:
            k = torch.cat([kv.k, k], dim=2)
            v = torch.cat([kv.v, v], dim=2)
        S, T = k.shape[2], q.shape[2]
        # query i sits at cache index S - T + i and sees keys up to there
        allowed = torch.arange(S, device=u.device)[None, :] <= (S - T + torch.arange(T, device=u.device))[:, None]
        return self._attend(q, k, v, allowed), DraftKV(k, v)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """Softmax attention of q (B, H, T, hd) over k, v (B, Hkv, S, hd) where ``allowed`` (T, S)."""
        scores = q @ self._rep(k).transpose(2, 3) / math.sqrt(self.hd)  # (B, H, T, S)
        p = torch.softmax(scores.masked_fill(~allowed, float("-inf")).float(), dim=-1).to(q.dtype)
        return self._out(p @ self._rep(v))

    def forward_tree(self, u: torch.Tensor, positions: torch.Tensor, kv: DraftKV | None,
                     tree: tuple[torch.Tensor, torch.Tensor] | None, allowed: torch.Tensor
                     ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Tree drafting: m new nodes after the S cached real positions (batch 1). Each node sees every
        real position, the earlier tree entries ``tree`` (E of them) where ``allowed`` (m, E) is True
        (its ancestors), and itself. Returns the attention output and the nodes' own (k, v)."""
        q, k, v = self._qkv(u, positions)
        m = q.shape[2]
        ks, vs = [], []
        S = 0
        if kv is not None and kv.length:
            ks.append(kv.k)
            vs.append(kv.v)
            S = kv.length
        E = 0
        if tree is not None and tree[0].shape[2]:
            ks.append(tree[0])
            vs.append(tree[1])
            E = int(tree[0].shape[2])
        dev = u.device
        mask = torch.cat([torch.ones((m, S), dtype=torch.bool, device=dev),
                          allowed.to(dev).reshape(m, E),
                          torch.eye(m, dtype=torch.bool, device=dev)], dim=1)  # (m, S + E + m)
        return self._attend(q, torch.cat([*ks, k], dim=2), torch.cat([*vs, v], dim=2), mask), (k, v)

    def forward_ttt(self, u: torch.Tensor, positions: torch.Tensor,
                    steps: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Training-time test, step i = len(steps): column t attends to the step-0 keys of columns
        <= t (causal) and to its own keys of steps 1..i (one per step, "diagonal").

        This is what decoding sees when a chain starts at real position t: the real prefix and the
        chain's own earlier steps. u: (B, T, 2d); steps: [(k_j, v_j)] of earlier steps, (B, Hkv, T, hd).
        """
        q, k, v = self._qkv(u, positions)
        T = q.shape[2]
        k0, v0 = (k, v) if not steps else steps[0]
        scores0 = q @ self._rep(k0).transpose(2, 3) / math.sqrt(self.hd)  # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=u.device).tril()
        scores0 = scores0.masked_fill(~causal, float("-inf"))
        diag_k = [kj for kj, _ in steps[1:]] + ([k] if steps else [])
        diag_v = [vj for _, vj in steps[1:]] + ([v] if steps else [])
        diag = [(q * self._rep(kj)).sum(-1, keepdim=True) / math.sqrt(self.hd) for kj in diag_k]  # (B, H, T, 1)
        p = torch.softmax(torch.cat([scores0, *diag], dim=-1).float(), dim=-1).to(q.dtype)  # (B, H, T, T + i)
        o = p[..., :T] @ self._rep(v0)  # (B, H, T, hd)
        for j, vj in enumerate(diag_v):
            o = o + p[..., T + j : T + j + 1] * self._rep(vj)
        return self._out(o), (k, v)


class MLP(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    """The one decoder layer: attention input [norm(emb) ; norm(hidden)], residual = hidden."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def _input(self, emb: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.input_layernorm(emb), self.hidden_norm(hidden)], dim=-1)  # (B, T, 2d)

    def _finish(self, hidden: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        h = hidden + attn
        return h + self.mlp(self.post_attention_layernorm(h))


def expected_state_shapes(cfg: DraftConfig) -> dict[str, tuple[tuple[int, ...], torch.dtype | None]]:
    """Every key of a released head's state dict with its shape (and dtype for the index buffers)."""
    d, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    return {
        "fc.weight": ((d, 3 * cfg.target_hidden_size), None),
        "midlayer.self_attn.q_proj.weight": ((H * hd, 2 * d), None),
        "midlayer.self_attn.k_proj.weight": ((Hkv * hd, 2 * d), None),
        "midlayer.self_attn.v_proj.weight": ((Hkv * hd, 2 * d), None),
        "midlayer.self_attn.o_proj.weight": ((d, H * hd), None),
        "midlayer.mlp.gate_proj.weight": ((inter, d), None),
        "midlayer.mlp.up_proj.weight": ((inter, d), None),
        "midlayer.mlp.down_proj.weight": ((d, inter), None),
        "midlayer.hidden_norm.weight": ((d,), None),
        "midlayer.input_layernorm.weight": ((d,), None),
        "midlayer.post_attention_layernorm.weight": ((d,), None),
        "norm.weight": ((d,), None),
        "lm_head.weight": ((cfg.draft_vocab_size, d), None),
        "d2t": ((cfg.draft_vocab_size,), torch.int64),
        "t2d": ((cfg.vocab_size,), torch.bool),
    }


class Eagle3Draft(nn.Module):
    """One EAGLE-3 draft head. Attach the target's input embeddings before use."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.config = cfg
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = MidLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self._embed: Any = None  # the target's nn.Embedding: shared and frozen, so not a submodule

    # ------------------------------------------------------------------ set-up
    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Normal(0, std) linears and unit norms, from an explicit generator (reproducible)."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=generator) * std)

    def attach_embeddings(self, embedding: nn.Module) -> Eagle3Draft:
        w = getattr(embedding, "weight", None)
        if w is None or tuple(w.shape) != (self.config.vocab_size, self.config.hidden_size):
            shape = None if w is None else tuple(w.shape)
            raise ValueError(f"embedding shape {shape} != (vocab_size, hidden_size) "
                             f"{(self.config.vocab_size, self.config.hidden_size)}")
        object.__setattr__(self, "_embed", embedding)  # bypass Module registration: never in state_dict
        return self

    def set_vocab(self, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
        with torch.no_grad():
            self.d2t.copy_(d2t.to(torch.int64))
            self.t2d.copy_(t2d.to(torch.bool))

    @property
    def draft_ids_to_target(self) -> torch.Tensor:
        """(N_draft,) target id of each draft id."""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        if self._embed is None:
            raise RuntimeError("attach the target's embeddings first (attach_embeddings)")
        with torch.no_grad():  # frozen: no gradient ever flows into the target's table
            e = self._embed(ids)
        return e.to(self.fc.weight.dtype)

    # ------------------------------------------------------------------ compute
    def fuse(self, aux: torch.Tensor) -> torch.Tensor:
        """(B, T, 3 d_target) concatenated target states -> (B, T, d)."""
        return self.fc(aux.to(self.fc.weight.dtype))

    def step(self, hidden: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor,
             kv: DraftKV | None) -> tuple[torch.Tensor, DraftKV]:
        """Decode T positions: hidden (B, T, d) (fused target state or the draft's own o), next_ids
        (B, T) the token after each position, positions (B, T). Returns o (B, T, d), pre-norm."""
        layer = self.midlayer
        u = layer._input(self.embed(next_ids), hidden)
        a, kv = layer.self_attn.forward_cached(u, positions, kv)
        return layer._finish(hidden, a), kv

    def step_tree(self, hidden: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor, kv: DraftKV | None,
                  tree: tuple[torch.Tensor, torch.Tensor] | None, allowed: torch.Tensor
                  ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`step` for m tree nodes at once (batch 1): each attends to the real cache ``kv``, to
        the tree entries of its ancestors (``allowed`` (m, E) over ``tree``'s E entries) and to itself;
        the draft cache is not extended. Returns o (1, m, d) and the nodes' (k, v)."""
        layer = self.midlayer
        u = layer._input(self.embed(next_ids), hidden)
        a, kvn = layer.self_attn.forward_tree(u, positions, kv, tree, allowed)
        return layer._finish(hidden, a), kvn

    def logits(self, o: torch.Tensor) -> torch.Tensor:
        """(..., d) draft states -> (..., N_draft) logits (float32)."""
        return self.lm_head(self.norm(o)).float()

    def ttt(self, aux: torch.Tensor, tokens: torch.Tensor, n_steps: int) -> list[torch.Tensor]:
        """Training-time test over whole sequences: aux (B, T, 3 d_target) at x_0..x_{T-1}, tokens
        (B, T). Step i, column t reads x_{t+i+1} (0 past the end) and predicts x_{t+i+2}; returns
        o of every step, each (B, T, d)."""
        B, T = tokens.shape
        hidden = self.fuse(aux)  # (B, T, d)
        pos = torch.arange(T, device=tokens.device)[None].expand(B, T)
        layer = self.midlayer
        steps: list[tuple[torch.Tensor, torch.Tensor]] = []
        outs = []
        for i in range(n_steps):
            nxt = torch.zeros_like(tokens)
            if i + 1 < T:
                nxt[:, : T - i - 1] = tokens[:, i + 1 :]
            u = layer._input(self.embed(nxt), hidden)
            a, kv = layer.self_attn.forward_ttt(u, pos + i, steps)
            steps.append(kv)
            hidden = layer._finish(hidden, a)
            outs.append(hidden)
        return outs
