"""What ``lenpred generate`` prints while a generation runs (:func:`lenpred.outlets.live.open_generation`):
the text as cycles commit it, or JSON lines (``--json``); with a length head on a terminal, a live line of
the predicted remaining and total tokens on stderr; one JSON line per cycle to an events file; and, at the
end, the text (or the ``done`` line) and the summary lines on stderr."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["StreamOptions", "StreamPrinter", "finish"]


@dataclass(frozen=True)
class StreamOptions:
    """The flags that shape the stream: ``--json``, whether a ``--length-head`` runs, ``--quiet``,
    ``--greedy``, ``--tree`` (its text) and ``--k``."""

    json: bool = False
    length_head: bool = False
    quiet: bool = False
    greedy: bool = False
    tree: str | None = None
    k: int = 3


class StreamPrinter:
    """The stream: text on stdout as cycles commit it, or JSON lines (``--json``); with a length head
    on a terminal, a live line on stderr; ``--events FILE``: one JSON line per cycle."""

    def __init__(self, opts: StreamOptions, tokenizer: Any, events: Any) -> None:
        self.opts, self.tokenizer, self.events = opts, tokenizer, events
        self.printed = ""
        self.live = not opts.json and opts.length_head and sys.stderr.isatty()
        self.stream_text = not opts.json and not opts.length_head

    def __call__(self, c: Any, ev: Any) -> None:
        now = self.tokenizer.decode(c.generated, skip_special_tokens=True)
        delta = now[len(self.printed):]
        self.printed = now
        pred = ev.to_json() if ev is not None else {}
        for k in ("cycle", "committed", "n_generated"):
            pred.pop(k, None)
        if self.stream_text:
            sys.stdout.write(delta)
            sys.stdout.flush()
        if self.opts.json:
            sys.stdout.write(json.dumps({"event": "cycle", "cycle": c.index, "tokens": c.committed, "text": delta,
                                         "n_generated": c.n_generated, **pred}) + "\n")
            sys.stdout.flush()
        if self.live and ev is not None:
            tail = now[-40:].replace("\n", " ")
            sys.stderr.write(f"\r\033[K{c.n_generated} tokens | ~{ev.remaining_now:.0f} left "
                             f"[{ev.remaining_q10:.0f}-{ev.remaining_q90:.0f} after t={ev.t}] | total ~{ev.total:.0f} "
                             f"[{ev.total_q10:.0f}-{ev.total_q90:.0f}] | ...{tail}")
            sys.stderr.flush()
        if self.events is not None:
            self.events.write(json.dumps({"cycle": c.index, "proposed": c.proposed, "accepted": c.accepted,
                                          "committed": c.committed, "n_generated": c.n_generated,
                                          "state_positions": [c.positions[0], c.positions[-1]] if c.positions else [],
                                          "seconds": round(c.seconds, 6), **pred}) + "\n")


def finish(opts: StreamOptions, session: Any, res: Any, printer: StreamPrinter) -> None:
    """The end of the stream: the text (or the JSON ``done`` line) and the summary lines on stderr."""
    g, online = res.gen, session.online
    if printer.live:
        sys.stderr.write("\n")
    if opts.json:
        last = online.events[-1].to_json() if online is not None and online.events else {}
        sys.stdout.write(json.dumps({"event": "done", "n_generated": len(g.tokens), "stop_reason": g.stop_reason,
                                     "tau": round(g.tau, 4), "seconds": round(res.seconds, 3), "text": res.text,
                                     "last_prediction": last}) + "\n")
    else:
        sys.stdout.write((res.text if not printer.stream_text else res.text[len(printer.printed):]) + "\n")
    if res.head_seconds and not opts.quiet:
        per, fwd = res.head_ms_per_cycle, res.loop_pass_ms
        print(f"lenpred generate: length head {per:.2f} ms per cycle (median over {len(res.head_seconds)} "
              f"cycles) = {100 * per / fwd:.2f}% of the loop's mean target pass ({fwd:.1f} ms)", file=sys.stderr)
    if not opts.quiet:
        mode = "greedy" if opts.greedy else f"sampling ({session.card_source})"
        shape = f"tree {opts.tree}" if opts.tree else f"k={opts.k}"
        spec_s = f"{shape}, tau={g.tau:.2f}, " if session.heads.draft else "plain, "
        dt = res.seconds
        print(f"lenpred generate: {len(g.tokens)} tokens in {dt:.1f}s ({len(g.tokens) / max(dt, 1e-9):.1f} tok/s), "
              f"{spec_s}{g.target_forwards} target forwards, {mode}, stop={g.stop_reason}", file=sys.stderr)
