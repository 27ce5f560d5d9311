"""Speculative decoding with an EAGLE-3 head: a chain of k draft tokens, one verifying target pass.

One cycle, with ``T`` tokens already in the target's cache and ``x_T`` the last committed token:

1. **Draft, real positions.** The target states of the positions verified last cycle (``P0..T-1``)
   are fused and run through the draft layer with the tokens after them -- one draft pass over all of
   them, appended to the draft's KV cache. Its outputs ``o_t`` are *the draft hidden states* of the
   sequence: exactly what a teacher-forced pass over the same tokens computes (the OUTLETS head reads
   them; every cycle hands them to ``on_cycle`` without any extra forward pass).
2. **Draft, chain.** From ``o_{T-1}`` the draft proposes ``x^_{T+1}``; step ``j`` re-reads its own
   output with the token it proposed, at position ``T - 1 + j``, and proposes ``x^_{T+j+1}``
   (k proposals in all).
3. **Verify.** The target runs ``[x_T, x^_{T+1} .. x^_{T+k}]`` in one pass with its KV cache.
   Greedy: accept while the target's argmax equals the proposal, then commit the target's own argmax.
   Sampling: accept ``x^`` with probability ``min(1, p(x^)/q(x^))``; at the first rejection sample
   from ``norm(max(p - q, 0))``; if all k are accepted, sample one more token from ``p``. ``p`` and
   ``q`` are the card's distributions (penalties, temperature, min-p, ...) of target and draft, with
   the penalty counts of the tokens before each position. This makes every committed token exactly
   distributed as under plain sampling (Leviathan et al. 2023; Chen et al. 2023).
4. **Crop.** The target cache keeps ``T + a + 1`` positions (a = accepted drafts), the draft cache
   drops its chain entries; the verified positions' target states become next cycle's step 1.

Per cycle the target runs once and commits ``a + 1`` tokens: ``tau`` is their mean (the target's own
token included, as EAGLE reports it; the prefill's first token is not counted). ``k = 0`` (no draft)
is plain decoding through the same target and sampling code, the baseline of every speed-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lenpred.collect.base import SamplingConfig
from lenpred.draft.model import DraftKV, Eagle3Draft
from lenpred.draft.sampling import CardSampler
from lenpred.draft.target import Target
from lenpred.draft.tree import DraftTree, TreeSpec, grow_tree
from lenpred.errors import ConfigError

__all__ = ["Cycle", "Generation", "SpeculativeDecoder", "cached_draft_states", "teacher_forced_draft_states"]


@dataclass
class Cycle:
    """What one cycle did, handed to ``on_cycle`` as it happens."""

    index: int
    proposed: list[int]  # the k draft tokens (target ids)
    accepted: int  # how many of them the target accepted
    committed: list[int]  # tokens appended to the output (EOS excluded, cut at max_new_tokens)
    states: torch.Tensor  # (n, d) draft hidden states computed this cycle at real positions
    positions: list[int]  # their sequence positions t (state t read x_t's target state and token x_{t+1})
    chain_states: torch.Tensor  # (k - 1, d) the speculative chain's states (hypothetical positions)
    n_generated: int  # tokens generated so far, after this cycle
    seconds: float = 0.0  # wall time of the cycle
    generated: list[int] = field(default_factory=list)  # the output so far (the live list: read, don't modify)
    fused: torch.Tensor | None = None  # (n, d) the draft's fc output at ``positions`` (the input of ``states``)
    aux: torch.Tensor | None = None  # (n, 3 d_target) the target's captured states at ``positions``


@dataclass
class Generation:
    prompt_ids: list[int]
    tokens: list[int]  # generated tokens, EOS excluded
    stop_reason: str  # "eos" or "length"
    k: int
    target_forwards: int  # including the prefill
    accepted: list[int] = field(default_factory=list)  # per verifying cycle
    committed: list[int] = field(default_factory=list)  # tokens committed per verifying cycle (EOS included)
    seconds: float = 0.0
    target_seconds: float = 0.0  # wall time inside target passes (prefill included)
    draft_seconds: float = 0.0  # wall time inside draft passes and proposals
    states: torch.Tensor | None = None  # (n, d) draft states at positions 0..n-1, when kept

    @property
    def tau(self) -> float:
        """Tokens committed per verifying target forward (target's own token included)."""
        return sum(self.committed) / len(self.committed) if self.committed else 0.0


class SpeculativeDecoder:
    """Batch-1 decoding with an optional EAGLE-3 head. ``sampling=None`` is greedy."""

    def __init__(self, target: Target, draft: Eagle3Draft | None, *, k: int, sampling: SamplingConfig | None,
                 max_new_tokens: int, eos_ids: Sequence[int], tree: TreeSpec | None = None) -> None:
        if tree is not None:
            if sampling is not None:
                raise ConfigError("tree drafting is implemented for greedy decoding only",
                                  "drop --tree to sample with a chain of k drafts (exact speculative sampling)")
            if draft is None:
                raise ConfigError("a draft tree needs a draft head", "pass --draft PATH with --tree")
            k = tree.depth
        if draft is not None and k < 1:
            raise ConfigError(f"k must be >= 1 draft tokens per cycle, got {k}", "pass --k 1 or more")
        self.tree = tree
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be positive, got {max_new_tokens}", "pass --max-new-tokens 1 or more")
        self.target = target
        self.draft = draft
        self.k = int(k) if draft is not None else 0
        self.sampler = CardSampler(sampling) if sampling is not None else None
        self.max_new = int(max_new_tokens)
        self.eos = set(int(e) for e in eos_ids)
        if draft is not None:
            draft.attach_embeddings(target.embedding)
            self._d2t_ids = draft.draft_ids_to_target.to(target.device)  # (N_draft,)

    # ------------------------------------------------------------------ token choice
    def _target_token(self, logits: torch.Tensor, st: _State, gen: torch.Generator | None) -> int:
        """The target's own next token from logits (V,)."""
        if self.sampler is None:
            return int(torch.argmax(logits))
        p = self.sampler.probs(logits[None], st.counts[None], st.seen[None])[0]
        return int(torch.multinomial(p, 1, generator=gen))

    def _draft_dist(self, dlogits: torch.Tensor, counts: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """Draft logits (N_draft,) -> the card's distribution q over the target vocabulary (V,)."""
        assert self.sampler is not None
        full = torch.full((self.target.vocab_size,), float("-inf"), device=dlogits.device)
        full[self._d2t_ids] = dlogits.float()
        return self.sampler.probs(full[None], counts[None], seen[None])[0]

    def propose(self, dlogits: torch.Tensor, position: int, counts: torch.Tensor, seen: torch.Tensor,
                gen: torch.Generator | None) -> tuple[int, torch.Tensor | None]:
        """One draft token (target id) for sequence index ``position`` and the distribution it was
        drawn from (None when greedy). Tests override this to inject proposals."""
        if self.sampler is None:
            return int(self._d2t_ids[int(torch.argmax(dlogits))]), None
        q = self._draft_dist(dlogits, counts, seen)
        return int(torch.multinomial(q, 1, generator=gen)), q

    # ------------------------------------------------------------------ main loop
    @torch.inference_mode()
    def generate(self, prompt_ids: Sequence[int], *, generator: torch.Generator | None = None,
                 on_cycle: Callable[[Cycle], Any] | None = None, keep_states: bool = False) -> Generation:
        t0 = time.perf_counter()
        dev = self.target.device
        prompt = [int(x) for x in prompt_ids]
        if not prompt:
            raise ConfigError("the prompt is empty after tokenization", "pass a non-empty prompt")
        st = _State(self.target.vocab_size, dev, prompt)
        res = Generation(prompt_ids=prompt, tokens=[], stop_reason="length", k=self.k, target_forwards=0)
        cache = self.target.new_cache()
        tt = time.perf_counter()
        logits, aux = self.target.forward(torch.tensor([prompt], device=dev), cache)  # (1, P, V), (1, P, 3d)
        res.target_seconds += time.perf_counter() - tt
        res.target_forwards += 1
        first = self._target_token(logits[0, -1], st, generator)
        if self._commit(st, res, [first]) or self.draft is None:
            if self.draft is None and not st.done:
                self._plain(st, res, cache, generator, on_cycle)
            res.seconds = time.perf_counter() - t0
            return res
        kept: list[torch.Tensor] = []
        pending = aux[0]  # (n, 3d) target states of positions not yet in the draft cache
        dkv: DraftKV | None = None
        T = len(prompt)  # positions in the target cache; seq[T] is the last committed token
        cycle = 0
        while not st.done:
            tc = time.perf_counter()
            seq = st.seq
            p0 = T - pending.shape[0]
            # 1. draft over the real positions p0..T-1 (one pass)
            aux_in = pending
            fused = self.draft.fuse(pending[None])  # (1, n, d)
            o, dkv = self.draft.step(
                fused,
                torch.tensor([seq[p0 + 1 : T + 1]], device=dev),
                torch.arange(p0, T, device=dev)[None],
                dkv,
            )  # o: (1, n, d)
            states = o[0]
            if keep_states:
                kept.append(states.detach().clone())
            res.draft_seconds += time.perf_counter() - tc
            # 2-3. draft a chain (or a tree) from the last real state, verify it in one target pass;
            # the target's cache keeps the verified prefix (or the tree's accepted path)
            if self.tree is not None:
                a, new, pending, props, chain = self._tree_cycle(st, res, o[:, -1:], dkv, T, cache)
            else:
                a, new, pending, props, chain = self._chain_cycle(st, res, o[:, -1:], dkv, T, cache, generator)
            done = self._commit(st, res, new)
            # 4. the draft cache drops its chain entries; the verified positions' target states are
            # next cycle's step 1
            dkv.crop(T)
            ev = Cycle(index=cycle, proposed=props, accepted=a, committed=st.last_committed,
                       states=states, positions=list(range(p0, T)),
                       chain_states=torch.stack(chain) if chain else states.new_zeros((0, states.shape[-1])),
                       n_generated=len(res.tokens), seconds=time.perf_counter() - tc, generated=res.tokens,
                       fused=fused[0], aux=aux_in)
            if on_cycle is not None:
                on_cycle(ev)
            T += a + 1
            cycle += 1
            if done:
                break
        if keep_states and kept:
            res.states = torch.cat(kept, dim=0)
        res.seconds = time.perf_counter() - t0
        return res

    def _chain_cycle(self, st: _State, res: Generation, root: torch.Tensor, dkv: DraftKV, T: int, cache: Any,
                     gen: torch.Generator | None) -> tuple[int, list[int], torch.Tensor, list[int], list[torch.Tensor]]:
        """Draft k tokens from the draft state ``root`` (1, 1, d) of position T - 1, verify them in one
        target pass, crop the target's cache to the verified prefix. Returns (accepted drafts, tokens
        to commit, next cycle's pending target states, the proposals, the chain's draft states)."""
        assert self.draft is not None
        dev = self.target.device
        tc = time.perf_counter()
        counts, seen = st.counts.clone(), st.seen.clone()
        props: list[int] = []
        qs: list[torch.Tensor | None] = []
        prev = root
        ckv = dkv  # the real prefix, extended by the chain's own entries (a new object: dkv is kept)
        chain: list[torch.Tensor] = []
        for j in range(self.k):
            if j > 0:
                prev, ckv = self.draft.step(prev, torch.tensor([[props[-1]]], device=dev),
                                            torch.tensor([[T - 1 + j]], device=dev), ckv)
                chain.append(prev[0, 0])
            x, q = self.propose(self.draft.logits(prev)[0, -1], T + 1 + j, counts, seen, gen)
            props.append(x)
            qs.append(q)
            counts[x] += 1
            seen[x] = True
        res.draft_seconds += time.perf_counter() - tc
        tt = time.perf_counter()
        vlogits, vaux = self.target.forward(torch.tensor([[st.seq[T], *props]], device=dev), cache)  # (1, k+1, ·)
        res.target_seconds += time.perf_counter() - tt
        res.target_forwards += 1
        a, y = self._verify(vlogits[0], props, qs, st, gen)
        res.accepted.append(a)
        res.committed.append(a + 1)
        self.target.crop(cache, T + a + 1)
        return a, props[:a] + [y], vaux[0, : a + 1], props, chain

    # ------------------------------------------------------------------ tree drafting (greedy)
    def build_tree(self, root: torch.Tensor, T: int, dkv: DraftKV) -> DraftTree:
        """Grow the dynamic tree from the draft state ``root`` (1, 1, d) of position T - 1 (whose
        logits propose the token after the last committed one). Tests override this to inject trees."""
        assert self.draft is not None and self.tree is not None
        return grow_tree(self.draft, self._d2t_ids, self.tree, root, T, dkv)

    def _tree_cycle(self, st: _State, res: Generation, root: torch.Tensor, dkv: DraftKV, T: int, cache: Any
                    ) -> tuple[int, list[int], torch.Tensor, list[int], list[torch.Tensor]]:
        """Draft a tree, verify it in one target pass, keep the accepted path's cache entries.
        Returns (accepted drafts, tokens to commit, next cycle's pending target states, the tree's
        tokens, the accepted path's draft states)."""
        dev = self.target.device
        tc = time.perf_counter()
        tree = self.build_tree(root, T, dkv)
        n = len(tree.tokens)
        for i, p in enumerate(tree.parents):
            if not -1 <= p < i:
                raise ValueError(f"tree node {i} has parent {p}: parents must come first")
        res.draft_seconds += time.perf_counter() - tc
        # tokens at rows 0..n: the last committed token, then the nodes; each sees the cache, row 0
        # and its own ancestors
        vis = torch.zeros((n + 1, n + 1), dtype=torch.bool)
        vis[:, 0] = True
        for i, p in enumerate(tree.parents):
            vis[i + 1, i + 1] = True
            if p >= 0:
                vis[i + 1] |= vis[p + 1]
        vis[0, 0] = True
        mask = torch.cat([torch.ones((n + 1, T), dtype=torch.bool), vis], dim=1)[None].to(dev)
        pos = torch.tensor([[T] + [T + d for d in tree.depths]], device=dev)
        ids = torch.tensor([[st.seq[T], *tree.tokens]], device=dev)
        tt = time.perf_counter()
        vlogits, vaux = self.target.forward(ids, cache, positions=pos, mask=mask)
        res.target_seconds += time.perf_counter() - tt
        res.target_forwards += 1
        best = torch.argmax(vlogits[0], dim=-1).tolist()  # (n + 1,)
        children: dict[int, dict[int, int]] = {}
        for i, (p, t) in enumerate(zip(tree.parents, tree.tokens, strict=True)):
            children.setdefault(p, {}).setdefault(t, i)
        path: list[int] = []
        cur, y = -1, int(best[0])
        while y in children.get(cur, {}):
            cur = children[cur][y]
            path.append(cur)
            y = int(best[cur + 1])
        a = len(path)
        res.accepted.append(a)
        res.committed.append(a + 1)
        self.target.keep(cache, list(range(T + 1)) + [T + 1 + i for i in path])
        pending = vaux[0, [0] + [i + 1 for i in path]]
        chain = [tree.states[i] for i in path if i in tree.states]
        return a, [tree.tokens[i] for i in path] + [y], pending, tree.tokens, chain

    def _plain(self, st: _State, res: Generation, cache: Any, gen: torch.Generator | None,
               on_cycle: Callable[[Cycle], Any] | None) -> None:
        """Plain decoding: one target forward per token, same forward and sampling code."""
        dev = self.target.device
        cycle = 0
        while not st.done:
            tc = time.perf_counter()
            logits, _ = self.target.forward(torch.tensor([[st.seq[-1]]], device=dev), cache)
            res.target_seconds += time.perf_counter() - tc
            res.target_forwards += 1
            y = self._target_token(logits[0, -1], st, gen)
            res.accepted.append(0)
            res.committed.append(1)
            self._commit(st, res, [y])
            if on_cycle is not None:
                empty = torch.zeros((0, 0))
                on_cycle(Cycle(cycle, [], 0, st.last_committed, empty, [], empty, len(res.tokens),
                               time.perf_counter() - tc, res.tokens))
            cycle += 1

    def _verify(self, logits: torch.Tensor, props: list[int], qs: list[torch.Tensor | None], st: _State,
                gen: torch.Generator | None) -> tuple[int, int]:
        """logits (k+1, V) of the verifying pass -> (accepted drafts a, the target's token)."""
        k = len(props)
        if self.sampler is None:
            best = torch.argmax(logits, dim=-1).tolist()  # (k+1,)
            a = 0
            while a < k and best[a] == props[a]:
                a += 1
            return a, int(best[a])
        # penalty state before each position: committed tokens plus the proposals before it
        dev = logits.device
        onehot = torch.zeros((k + 1, self.target.vocab_size), device=dev)
        for j, x in enumerate(props):
            onehot[j + 1 :, x] += 1
        counts = st.counts[None] + onehot
        seen = st.seen[None] | (onehot > 0)
        p = self.sampler.probs(logits, counts, seen)  # (k+1, V)
        for j, x in enumerate(props):
            q = qs[j]
            assert q is not None
            ratio = float(p[j, x]) / max(float(q[x]), 1e-30)
            u = float(torch.rand((), generator=gen, device=dev))
            if u < min(1.0, ratio):
                continue
            resid = torch.clamp(p[j] - q, min=0.0)
            if float(resid.sum()) <= 0.0:  # p == q: nothing to correct (cannot be reached with u < 1)
                resid = p[j]
            return j, int(torch.multinomial(resid / resid.sum(), 1, generator=gen))
        return k, int(torch.multinomial(p[k], 1, generator=gen))

    def _commit(self, st: _State, res: Generation, toks: list[int]) -> bool:
        """Append tokens until EOS or max_new_tokens; True when the generation is over."""
        st.last_committed = []
        for t in toks:
            if t in self.eos:
                res.stop_reason = "eos"
                st.done = True
                return True
            st.add(t)
            res.tokens.append(t)
            st.last_committed.append(t)
            if len(res.tokens) >= self.max_new:
                res.stop_reason = "length"
                st.done = True
                return True
        return False


class _State:
    """The sequence so far and the card's penalty state (output counts, seen tokens)."""

    def __init__(self, vocab: int, device: torch.device, prompt: list[int]) -> None:
        self.seq = list(prompt)
        self.counts = torch.zeros(vocab, device=device)  # output tokens only (frequency / presence)
        self.seen = torch.zeros(vocab, dtype=torch.bool, device=device)  # prompt + output (repetition)
        self.seen[torch.tensor(prompt, device=device)] = True
        self.done = False
        self.last_committed: list[int] = []

    def add(self, t: int) -> None:
        self.seq.append(t)
        self.counts[t] += 1
        self.seen[t] = True


@torch.inference_mode()
def teacher_forced_draft_states(target: Target, draft: Eagle3Draft, ids: Sequence[int]) -> torch.Tensor:
    """Draft states o_0..o_{n-2} of a whole sequence in one target pass and one draft pass (n-1, d):
    what decoding computes cycle by cycle (step 1), so a head trained on these runs online."""
    draft.attach_embeddings(target.embedding)
    dev = target.device
    x = torch.tensor([list(ids)], device=dev)  # (1, n)
    _, aux = target.forward(x)  # (1, n, 3d)
    n = x.shape[1]
    o, _ = draft.step(draft.fuse(aux[:, :-1]), x[:, 1:], torch.arange(n - 1, device=dev)[None], None)
    return o[0]


@torch.inference_mode()
def cached_draft_states(draft: Eagle3Draft, embedding: torch.nn.Module, states: Any) -> torch.Tensor:
    """The same draft states from a cached sample (:class:`lenpred.draft.states.SampleStates`), with no
    target pass: (N - 1, d) at positions 0..N-2. The cache holds the target states in float16, so
    these match the online ones to float16 precision (~1e-3 relative), not float32."""
    draft.attach_embeddings(embedding)
    dev = draft.fc.weight.device
    aux = torch.from_numpy(states.aux[:-1].astype("float32")).to(dev)[None]  # (1, N-1, 3d)
    x = torch.from_numpy(states.tokens.astype("int64")).to(dev)[None]  # (1, N)
    n = x.shape[1]
    o, _ = draft.step(draft.fuse(aux), x[:, 1:], torch.arange(n - 1, device=dev)[None], None)
    return o[0]
