"""Tree drafting (greedy): whatever the tree holds, the output is plain greedy decoding token for
token, and a tree that hides the right continuation among wrong branches is still found and kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from draft_helpers import tiny_head, tiny_llama

from lenpred.collect.base import SamplingConfig
from lenpred.draft.speculative import SpeculativeDecoder
from lenpred.draft.target import Target
from lenpred.draft.tree import DraftTree, TreeSpec
from lenpred.errors import ConfigError

PROMPTS = [[1, 5, 9, 22], [3], [40, 2, 81, 13, 13, 60, 5]]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _plain(target: Target, prompt: list[int], n: int, eos: list[int]) -> list[int]:
    return (
        SpeculativeDecoder(target, None, k=0, sampling=None, max_new_tokens=n, eos_ids=eos)
        .generate(prompt)
        .tokens
    )


class OracleTree(SpeculativeDecoder):
    """Builds trees around the known greedy continuation: at every depth the true token sits behind
    ``wrong`` decoy siblings (so the accepted path runs through rows that are not contiguous), and
    with probability ``error`` the true token is left out at a depth (a partial acceptance)."""

    def __init__(self, *a, reference: list[int], error: float, wrong: int = 2, seed: int = 0, **kw) -> None:
        super().__init__(*a, **kw)
        self.ref = reference
        self.error = error
        self.wrong = wrong
        self.rng = np.random.default_rng(seed)
        self.trees: list[DraftTree] = []

    def build_tree(self, root, T, dkv):
        V = self.target.vocab_size
        tokens, parents, depths = [], [], []
        true_parent = -1
        for d in range(1, self.tree.depth + 1):
            true = self.ref[T + d] if T + d < len(self.ref) else 0
            for j in range(self.wrong):  # decoy siblings first: the true node is never row 1
                tokens.append((true + 1 + j) % V)
                parents.append(true_parent)
                depths.append(d)
            if self.rng.random() < self.error:
                break  # the truth is missing from here on
            tokens.append(true)
            parents.append(true_parent)
            depths.append(d)
            true_parent = len(tokens) - 1
        tree = DraftTree(tokens, parents, depths)
        self.trees.append(tree)
        return tree


def _oracle(target, head, reference, n, eos, error=0.0, **kw) -> OracleTree:
    """A depth-4 oracle tree decoder (the tree's shape comes from OracleTree, not from TreeSpec)."""
    return OracleTree(target, head, k=0, sampling=None, max_new_tokens=n, eos_ids=eos, tree=TreeSpec(4, 1, 1),
                      reference=reference, error=error, **kw)


def test_random_head_tree_equals_plain_greedy() -> None:
    model = tiny_llama()
    target = Target(model)
    head = tiny_head(model, 48)
    for prompt in PROMPTS:
        plain = _plain(target, prompt, 32, [])
        for spec in (TreeSpec(1, 1, 1), TreeSpec(3, 4, 10), TreeSpec(5, 6, 40)):
            g = SpeculativeDecoder(
                target, head, k=0, sampling=None, max_new_tokens=32, eos_ids=[], tree=spec
            ).generate(prompt)
            assert g.tokens == plain, (prompt, spec)
            assert g.target_forwards == len(g.committed) + 1  # one verifying pass per cycle, plus the prefill


def test_oracle_trees_hidden_among_decoys() -> None:
    model = tiny_llama()
    target = Target(model)
    head = tiny_head(model, 48)
    for prompt in PROMPTS:
        plain = _plain(target, prompt, 40, [])
        # all right: depth + 1 tokens per pass although the true node is the last at every depth
        g = _oracle(target, head, prompt + plain, 40, []).generate(prompt)
        assert g.tokens == plain
        assert set(g.accepted[:-1]) == {4} and g.tau > 4.5
        # partial acceptances at every depth: still the same output, cache gathered right
        g = _oracle(target, head, prompt + plain, 40, [], error=0.35, seed=3).generate(prompt)
        assert g.tokens == plain
        assert len(set(g.accepted)) >= 3


def test_tree_eos_and_length_cut() -> None:
    model = tiny_llama()
    target = Target(model)
    head = tiny_head(model, 48)
    prompt = PROMPTS[0]
    plain = _plain(target, prompt, 30, [])
    eos = plain[9]
    want = _plain(target, prompt, 30, [eos])
    assert want == plain[: plain.index(eos)]
    g = _oracle(target, head, prompt + plain, 30, [eos]).generate(prompt)
    assert g.tokens == want and g.stop_reason == "eos"
    g = _oracle(target, head, prompt + plain, 7, []).generate(prompt)
    assert g.tokens == plain[:7] and g.stop_reason == "length"


def test_built_tree_is_ancestor_closed_and_best_first() -> None:
    model = tiny_llama()
    target = Target(model)
    head = tiny_head(model, 48)
    dec = SpeculativeDecoder(
        target, head, k=0, sampling=None, max_new_tokens=8, eos_ids=[], tree=TreeSpec(4, 5, 23)
    )
    seen: list[DraftTree] = []
    orig = dec.build_tree

    def spy(root, T, dkv):
        t = orig(root, T, dkv)
        seen.append(t)
        return t

    dec.build_tree = spy  # type: ignore[method-assign]
    dec.generate(PROMPTS[2])
    assert seen
    for t in seen:
        assert len(t.tokens) == 23
        assert sum(d == 1 for d in t.depths) == 5  # every first-level candidate is kept (they score best)
        for i, (p, d) in enumerate(zip(t.parents, t.depths, strict=True)):
            assert p < i and (d == 1) == (p == -1) and (p < 0 or t.depths[p] == d - 1)
        sib = {}
        for p, tok in zip(t.parents, t.tokens, strict=True):
            assert tok not in sib.setdefault(p, set())  # no duplicate child: each branch is a new token
            sib[p].add(tok)


def test_tree_states_match_the_chain_on_its_first_branch() -> None:
    """A tree of width 1 is a chain: the same drafts, the same acceptance, cycle by cycle."""
    model = tiny_llama()
    target = Target(model)
    head = tiny_head(model, 48)
    with torch.no_grad():  # large weights: attention far from uniform, so positions and masks matter
        for name, p in head.named_parameters():
            if not name.endswith("norm.weight"):
                p.mul_(15.0)
    prompt = PROMPTS[2]
    for depth in (3, 5):
        pc: list[list[int]] = []
        pt: list[list[int]] = []
        chain = SpeculativeDecoder(
            target, head, k=depth, sampling=None, max_new_tokens=24, eos_ids=[]
        ).generate(prompt, on_cycle=lambda c, pc=pc: pc.append(c.proposed))
        tree = SpeculativeDecoder(
            target, head, k=0, sampling=None, max_new_tokens=24, eos_ids=[], tree=TreeSpec(depth, 1, depth)
        ).generate(prompt, on_cycle=lambda c, pt=pt: pt.append(c.proposed))
        assert tree.tokens == chain.tokens and tree.accepted == chain.accepted
        assert pt == pc and all(len(p) == depth for p in pt)  # the same drafts, from the same draft positions


def test_tree_bad_input() -> None:
    model = tiny_llama()
    target = Target(model)
    head = tiny_head(model, 48)
    with pytest.raises(ConfigError, match="greedy"):
        SpeculativeDecoder(
            target,
            head,
            k=0,
            sampling=SamplingConfig(temperature=1.0),
            max_new_tokens=8,
            eos_ids=[],
            tree=TreeSpec(),
        )
    with pytest.raises(ConfigError, match="draft head"):
        SpeculativeDecoder(target, None, k=0, sampling=None, max_new_tokens=8, eos_ids=[], tree=TreeSpec())
    for bad in ("5,8", "a,b,c", "0,8,48", "5,8,-1"):
        with pytest.raises(ConfigError, match="tree"):
            TreeSpec.parse(bad)
    assert TreeSpec.parse("5,8,48") == TreeSpec(5, 8, 48)


@pytest.mark.slow
def test_smollm2_tree_equals_plain_greedy() -> None:
    """The real target (its attention implementation, a 4D tree mask, the cache gather): plain greedy's
    tokens, with the true continuation hidden behind decoys and missing at random depths."""
    from lenpred.models import load

    lm = load("smollm2-135m")
    target = Target(lm.model)
    head = tiny_head(lm.model, 2048, seed=0)
    eos = [lm.tokenizer.eos_token_id]
    msgs = [{"role": "user", "content": "Write a haiku about tea."}]
    prompt = lm.tokenizer(
        lm.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
        add_special_tokens=False,
    )["input_ids"]
    plain = _plain(target, prompt, 24, eos)
    g = _oracle(target, head, prompt + plain, 24, eos, error=0.3, wrong=3, seed=1).generate(prompt)
    assert g.tokens == plain
    assert max(g.accepted) >= 2  # multi-token acceptances through non-contiguous rows happened
    dec = SpeculativeDecoder(target, head, k=0, sampling=None, max_new_tokens=24, eos_ids=eos, tree=TreeSpec(3, 4, 12))
    assert dec.generate(prompt).tokens == plain
