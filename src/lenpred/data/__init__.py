"""Prompt sources and the run directory (the unit of data everything downstream reads).

- :mod:`~lenpred.data.rundir` a run directory (card, prompts, samples in shards), read and written;
- :mod:`~lenpred.data.lengths` the one way to read a run's sample lengths (and token ids), and the
  leave-one-out median;
- :mod:`~lenpred.data.split` the one seeded train / validation / test split of a run's prompts;
- :mod:`~lenpred.data.sources` prompt sources (ShareGPT, AlpacaEval, local JSONL / ShareGPT /
  Alpaca files) and the prompt table;
- :mod:`~lenpred.data.summary` a run's summary (``lenpred info``; printed by :mod:`lenpred.report.run_info`).

Names are imported on first use (PEP 562), so ``import lenpred.data`` does not import pandas.
"""

from __future__ import annotations

from lenpred.lazy import lazy_exports

_WHERE = {
    "CorruptShardError": "lenpred.data.rundir",
    "RunDir": "lenpred.data.rundir",
    "card_hash": "lenpred.data.rundir",
    "check_run_target": "lenpred.data.rundir",
    "check_token_ids": "lenpred.data.lengths",
    "loo_median": "lenpred.data.lengths",
    "loo_median_positions": "lenpred.data.lengths",
    "loo_median_sorted": "lenpred.data.lengths",
    "sample_lengths": "lenpred.data.lengths",
    "ROLES": "lenpred.data.split",
    "SPLIT_FILE": "lenpred.data.split",
    "Split": "lenpred.data.split",
    "SplitConfig": "lenpred.data.split",
    "build_split": "lenpred.data.split",
    "load_split": "lenpred.data.split",
    "write_split": "lenpred.data.split",
    "SOURCES": "lenpred.data.sources",
    "PromptConfig": "lenpred.data.sources",
    "build_prompt_table": "lenpred.data.sources",
    "load_raw": "lenpred.data.sources",
    "LengthStats": "lenpred.data.summary",
    "RunSummary": "lenpred.data.summary",
    "TargetProgress": "lenpred.data.summary",
    "run_summary": "lenpred.data.summary",
}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
