"""What ``lenpred collect`` prints when a collection ends: one JSON line summing it up."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lenpred.collect.runner import CollectSummary

__all__ = ["summary_line"]


def summary_line(s: CollectSummary) -> str:
    """The run, its card hash, what this call added (samples, tokens, tokens/s) and the totals; the
    unreadable shards set aside, where there were any."""
    return json.dumps(
        {
            "run": s.run_dir,
            "card_hash": s.card_hash,
            "new_samples": s.new_samples,
            "new_tokens": s.new_tokens,
            "tokens_per_s": round(s.tokens_per_s, 1),
            "total_samples": s.total_samples,
            "shards_written": s.shards_written,
            **({"set_aside": s.set_aside} if s.set_aside else {}),
        }
    )
