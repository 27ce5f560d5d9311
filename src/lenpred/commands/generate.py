"""``lenpred generate``: generate with the target, optionally speculatively with an EAGLE-3 head.

Greedy (``--greedy``) output is identical to plain greedy decoding; otherwise tokens are sampled
under a sampling card (``--card RUN`` or a card.json; by default the card recorded when the head was
trained, else lenpred's defaults) and speculative sampling keeps the target's distribution exactly.
The text streams to stdout as cycles commit tokens; a summary (tokens, tokens/s, tau) goes to
stderr, and ``--events FILE`` writes one JSON line per cycle.

``--length-head HEAD`` (with ``--draft``) runs an OUTLETS length head at every cycle on the draft
states the loop already has (:mod:`lenpred.outlets.online`; no extra forward pass) and reports the
predicted remaining tokens with an 80% interval and the predicted total: as JSON lines on stdout
with ``--json`` (one per cycle, then a final ``done`` line; no plain text), otherwise as a live line
on stderr (on a terminal) with the text printed at the end. A head trained on the states of another
draft head or target is refused before the target is loaded.

The generation itself is :func:`lenpred.outlets.live.open_generation` (the same as ``lenpred demo``'s
live part); this module parses the flags, :mod:`lenpred.report.generate` prints the stream.
"""

from __future__ import annotations

import argparse
from typing import Any

from lenpred.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="target model (default: the head's target, else smollm2-135m)")
    parser.add_argument("--draft", help="EAGLE-3 head directory (omit for plain decoding)")
    parser.add_argument("--prompt", help="the user message (rendered with the chat template)")
    parser.add_argument("--prompt-file", help="read the user message from this file")
    parser.add_argument("--k", type=int, default=3, help="draft tokens per cycle (chain length, >= 1; default %(default)s)")
    parser.add_argument("--tree", metavar="DEPTH,TOPK,NODES",
                        help="greedy only: draft a dynamic tree (EAGLE-2/3 style, e.g. 5,8,48) instead of a chain of --k")
    parser.add_argument("--greedy", action="store_true", help="greedy decoding instead of the card's sampling")
    parser.add_argument("--card", help="take the sampling card from this run directory or card.json")
    parser.add_argument("--max-new-tokens", type=int, help="cap on generated tokens (default: the card's)")
    parser.add_argument("--seed", type=int, help="sampling seed (default: the card's)")
    parser.add_argument("--no-chat-template", action="store_true", help="feed the prompt text as it is")
    parser.add_argument("--events", help="write one JSON line per cycle to this file")
    parser.add_argument("--length-head", help="OUTLETS length head (lenpred outlets train) run at every cycle; needs --draft")
    parser.add_argument("--json", action="store_true",
                        help="stream JSON lines on stdout (one per cycle: tokens, tokens so far, predictions), no plain text")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--quiet", action="store_true", help="print only the generated text")


def _check_args(args: argparse.Namespace) -> Any:
    """The flags' own checks (before anything loads); returns the tree spec or None."""
    if args.draft and args.k < 1:
        raise ConfigError(f"--k must be >= 1 draft tokens per cycle, got {args.k}", "pass --k 1 or more")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens must be positive, got {args.max_new_tokens}",
                          "pass --max-new-tokens 1 or more, or leave it out for the card's")
    tree = None
    if args.tree:
        from lenpred.draft.tree import TreeSpec

        tree = TreeSpec.parse(args.tree)
        if not args.draft:
            raise ConfigError("--tree needs --draft: the tree is drafted by the EAGLE-3 head", "pass --draft HEAD")
        if not args.greedy:
            raise ConfigError("--tree is implemented for greedy decoding only",
                              "add --greedy, or drop --tree to sample with a chain of --k drafts")
    if args.length_head and not args.draft:
        raise ConfigError("--length-head needs --draft: the length head reads the draft's hidden states",
                          "pass --draft HEAD (the draft head the length head was trained on)")
    return tree


def run(args: argparse.Namespace) -> int:
    from lenpred.commands.preflight import preflight

    preflight("generate", args)
    tree = _check_args(args)
    from lenpred.checks import prompt_text

    text = prompt_text(args.prompt, args.prompt_file)
    import torch

    from lenpred.outlets.live import GenerationSpec, open_generation
    from lenpred.report.generate import StreamOptions, StreamPrinter, finish

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    spec = GenerationSpec(draft=args.draft, length_head=args.length_head, model=args.model, card=args.card,
                          greedy=args.greedy, k=args.k, tree=tree, max_new_tokens=args.max_new_tokens, seed=args.seed,
                          chat_template=not args.no_chat_template)
    session = open_generation(text, spec)
    opts = StreamOptions(json=args.json, length_head=args.length_head is not None, quiet=args.quiet,
                         greedy=args.greedy, tree=args.tree if tree is not None else None, k=args.k)
    events = open(args.events, "w", encoding="utf-8") if args.events else None
    printer = StreamPrinter(opts, session.lm.tokenizer, events)
    try:
        res = session.run(printer)
    finally:
        if events is not None:
            events.close()
    finish(opts, session, res, printer)
    return 0
