"""Pilot: truncation rate and length of a few sampling cards on a small ShareGPT slice.

Each card is collected into its own run directory under ``out/pilot/`` with the real collector
(resumable: rerunning skips finished cards), then summarised. This is how the reference run's card
was chosen (fewer than 10% of samples may stop at max_new_tokens).

    python -m benchmarks.pilot_cards --prompts 16 --samples 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from lenpred.collect.base import SamplingConfig
from lenpred.collect.runner import CollectConfig, collect
from lenpred.data.rundir import RunDir
from lenpred.data.sources import PromptConfig

CARDS: dict[str, dict[str, float | int]] = {
    "t0.7-p0.9": {"temperature": 0.7, "top_p": 0.9},
    "t1.0-minp0.1": {"temperature": 1.0, "top_p": 1.0, "min_p": 0.1},
    "t0.7-p0.9-rep1.1": {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1},
    "t0.7-p0.9-rep1.2": {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.2},
    "t1.0-minp0.1-rep1.1": {"temperature": 1.0, "top_p": 1.0, "min_p": 0.1, "repetition_penalty": 1.1},
    "t0.7-p0.9-freq0.5": {"temperature": 0.7, "top_p": 0.9, "frequency_penalty": 0.5},
    "t1.0-minp0.1-freq0.3": {"temperature": 1.0, "top_p": 1.0, "min_p": 0.1, "frequency_penalty": 0.3},
    "t1.0-minp0.1-pres0.5": {"temperature": 1.0, "top_p": 1.0, "min_p": 0.1, "presence_penalty": 0.5},
    "t0.8-minp0.1-pres0.5": {"temperature": 0.8, "top_p": 1.0, "min_p": 0.1, "presence_penalty": 0.5},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--cards", nargs="*", default=list(CARDS), help=f"subset of {list(CARDS)}")
    ap.add_argument("--engine", default="llamacpp")
    ap.add_argument("--out", default="out/pilot")
    a = ap.parse_args()
    table = Table(title=f"sampling-card pilot: {a.prompts} ShareGPT prompts x {a.samples} samples, max_new_tokens={a.max_new_tokens}")
    for col in ("card", "samples", "truncated", "n >= 512", "mean len (EOS only)", "median len", "tok/s"):
        table.add_column(col)
    results = {}
    for name in a.cards:
        sampling = SamplingConfig.from_dict({"max_new_tokens": a.max_new_tokens, "seed": 0, **CARDS[name]}, "sampling")
        cfg = CollectConfig.from_dict(
            {
                "run_dir": str(Path(a.out) / f"{name}-m{a.max_new_tokens}"),
                "engine": a.engine,
                "prompts": PromptConfig(max_prompt_tokens=512),
                "sampling": sampling,
                "n_prompts": a.prompts,
                "samples": a.samples,
            }
        )
        s = collect(cfg)
        df = RunDir.open(cfg.run_dir).samples(columns=["prompt_id", "n_tokens", "stop_reason"])
        trunc = float((df.stop_reason == "length").mean())
        eos = df[df.stop_reason == "eos"].n_tokens
        results[name] = {"card": CARDS[name], "samples": len(df), "truncated": trunc, "mean_eos": float(eos.mean()) if len(eos) else None, "median": float(np.median(df.n_tokens))}
        table.add_row(name, str(len(df)), f"{trunc:.1%}", f"{(df.n_tokens >= 512).mean():.1%}", f"{eos.mean():.0f}" if len(eos) else "-", f"{np.median(df.n_tokens):.0f}", f"{s.tokens_per_s:.0f}" if s.new_samples else "(cached)")
    Console().print(table)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
