"""What ``lenpred info`` prints about a run directory: one table built from a RunSummary."""

from __future__ import annotations

from typing import Any

from lenpred.data.summary import RunSummary
from lenpred.report.table import Column, Table

__all__ = ["print_run_info", "run_info_table"]


def run_info_table(s: RunSummary) -> Table:
    rows = [
        ("model / engine", f"{s.model} / {s.engine}"),
        ("sampling card", ", ".join(f"{k}={v}" for k, v in s.sampling.items())),
        ("targets", "; ".join(f"{x['prompts']} prompts x {x['samples']}" for x in s.targets) or "-"),
        ("prompts / samples / shards", f"{s.prompts} / {s.samples} / {s.shards}"),
    ]
    if s.progress:
        rows.append(("target progress", "; ".join(
            f"{t.prompts} x {t.samples}: " + ("done" if t.missing_samples == 0 else
                                              f"{t.complete_prompts}/{t.prompts} prompts, {t.missing_samples} samples to go")
            for t in s.progress)))
    ln = s.lengths
    if ln is not None:
        spp = sorted(ln.samples_per_prompt.items(), key=lambda kv: -int(kv[0]))
        q = ln.length_quantiles
        rows += [
            ("prompts by samples collected", ", ".join(f"{v} with {k}" for k, v in spp)),
            ("truncated at max_new_tokens", f"{ln.truncated_share:.1%}"),
            (
                "length mean / p10 / p50 / p90 / p99",
                f"{ln.length_mean:.0f} / {q['0.1']:.0f} / {q['0.5']:.0f} / {q['0.9']:.0f} / {q['0.99']:.0f}",
            ),
        ]
        if ln.mean_within_prompt_sd_eos is not None:
            rows.append(("mean within-prompt sd (EOS samples)", f"{ln.mean_within_prompt_sd_eos:.0f} tokens"))
    return Table(f"run {s.run} (card {s.card_hash})", (Column("what", "left"), Column("value", "left")), tuple(rows))


def print_run_info(s: RunSummary, console: Any = None) -> None:
    from rich.console import Console

    t = run_info_table(s).to_rich()
    t.show_header = False
    (console or Console()).print(t)
