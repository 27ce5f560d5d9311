"""A quick, dependency-light summary of a run directory (used by `lenpred info` and the demo)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lenpred.data.rundir import RunDir


def run_summary(run: RunDir) -> dict[str, Any]:
    card = run.card
    out: dict[str, Any] = {
        "run": str(run.path),
        "card_hash": run.card_hash,
        "model": card["model"].get("id"),
        "engine": card["engine"].get("name"),
        "sampling": card["sampling"],
        "targets": card.get("targets", []),
    }
    prompts = run.prompts() if run.has_prompts() else None
    s = run.samples(columns=["prompt_id", "sample_idx", "n_tokens", "stop_reason"])
    out["prompts"] = 0 if prompts is None else int(len(prompts.index))
    out["samples"] = int(len(s.index))
    out["shards"] = len(run.shard_paths())
    if len(s.index):
        per = s.groupby("prompt_id").size()
        n = s["n_tokens"].to_numpy(dtype=float)
        eos = s["stop_reason"] == "eos"
        out["prompts_with_samples"] = int(per.size)
        out["samples_per_prompt"] = {str(k): int(v) for k, v in per.value_counts().sort_index().items()}
        out["truncated_share"] = float((~eos).mean())
        out["tokens"] = int(n.sum())
        out["length_mean"] = float(n.mean())
        out["length_quantiles"] = {q: float(np.quantile(n, float(q))) for q in ("0.1", "0.5", "0.9", "0.99")}
        out["eos_length_mean"] = float(n[eos.to_numpy()].mean()) if eos.any() else None
        within = s[eos].groupby("prompt_id")["n_tokens"]
        sd = within.std().dropna()
        out["mean_within_prompt_sd_eos"] = float(sd.mean()) if len(sd) else None
    return out


def print_run_summary(run: RunDir) -> None:
    from rich.console import Console
    from rich.table import Table

    s = run_summary(run)
    t = Table(title=f"run {s['run']} (card {s['card_hash']})", show_header=False)
    t.add_column("what")
    t.add_column("value")
    samp = s["sampling"]
    t.add_row("model / engine", f"{s['model']} / {s['engine']}")
    t.add_row(
        "sampling card",
        ", ".join(f"{k}={v}" for k, v in samp.items()),
    )
    t.add_row("targets", "; ".join(f"{x['prompts']} prompts x {x['samples']}" for x in s["targets"]) or "-")
    t.add_row("prompts / samples / shards", f"{s['prompts']} / {s['samples']} / {s['shards']}")
    if s["samples"]:
        spp = sorted(s["samples_per_prompt"].items(), key=lambda kv: -int(kv[0]))
        t.add_row("prompts by samples collected", ", ".join(f"{v} with {k}" for k, v in spp))
        t.add_row("truncated at max_new_tokens", f"{s['truncated_share']:.1%}")
        q = s["length_quantiles"]
        t.add_row("length mean / p10 / p50 / p90 / p99", f"{s['length_mean']:.0f} / {q['0.1']:.0f} / {q['0.5']:.0f} / {q['0.9']:.0f} / {q['0.99']:.0f}")
        if s["mean_within_prompt_sd_eos"] is not None:
            t.add_row("mean within-prompt sd (EOS samples)", f"{s['mean_within_prompt_sd_eos']:.0f} tokens")
    Console().print(t)
