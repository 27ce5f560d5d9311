"""The steps of ``lenpred demo`` (:mod:`lenpred.commands.demo`): the live run and its lengths table, the
reference run's bound, a few fast heads benched on it, and one live OUTLETS generation."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rich.console import Console

from lenpred.collect.base import SamplingConfig
from lenpred.collect.runner import CollectConfig, collect
from lenpred.data.rundir import RunDir
from lenpred.data.sources import PromptConfig
from lenpred.errors import DataError

__all__ = ["bench_heads", "live_outlets", "live_prompts", "live_run", "print_bound"]

DEMO_OPTIONS: dict[str, dict[str, int]] = {"llamacpp": {"n_parallel": 8}, "hf": {"batch_size": 8}}
# The live run's prompts: self-contained first turns of the reference run with 24 samples each, none
# cut at 512 tokens there and the widest p10-p90 spreads (so the table shows variation, not the cap).
LIVE_PROMPTS = ("jKSr8HV_0", "41mEEkg_0", "6o9RgvW_0", "vPCoJiz_0", "SyKu2Hj_0", "dCCdNuu_0")


def live_run(console: Console, a: argparse.Namespace, engine: str, sampling: SamplingConfig) -> None:
    """Collect the live run (kept in ``a.run``, else in a temporary directory) and print its lengths table."""
    from lenpred.report.demo import lengths_table

    with tempfile.TemporaryDirectory(prefix="lenpred-demo-") as tmp:
        run_dir = a.run or str(Path(tmp) / "demo")
        prompt_cfg, ref_lengths = live_prompts(Path(a.reference), a.prompts, Path(tmp))
        cfg = CollectConfig.from_dict({"run_dir": run_dir, "engine": engine, "prompts": prompt_cfg, "sampling": sampling,
                                       "n_prompts": a.prompts, "samples": a.samples,
                                       "engine_options": DEMO_OPTIONS.get(engine, {})})
        s = collect(cfg)
        rd = RunDir.open(run_dir)
        prompts = rd.prompts()
        samples = rd.samples(columns=["prompt_id", "sample_idx", "n_tokens", "stop_reason"])
    console.print(lengths_table(s, prompts, samples, ref_lengths))
    console.print("The same prompt, the same card: lengths still vary (the reference column: 24 samples of each in the "
                  "committed run). That spread bounds every prompt-only predictor.")


def live_prompts(reference: Path, n: int, tmp: Path) -> tuple[PromptConfig, dict[str, str]]:
    """The live run's prompt source: :data:`LIVE_PROMPTS` from the reference run (as a JSONL file,
    rendered with the same chat template), with each one's reference p10-p50-p90 by text; without
    the reference run, the first ShareGPT prompts."""
    import json

    import numpy as np

    from lenpred.data.lengths import sample_lengths

    try:
        rd = RunDir.open(reference)
        prompts = rd.prompts().set_index("prompt_id")
        chosen = [p for p in LIVE_PROMPTS if p in prompts.index][:n]
        lengths = sample_lengths(rd, with_prompts=False)
    except DataError:
        chosen = []
    if len(chosen) < n:  # another reference, or more prompts asked for than chosen: ShareGPT's own order
        return PromptConfig(max_prompt_tokens=256), {}
    f = tmp / "live_prompts.jsonl"
    f.write_text("".join(json.dumps({"id": p, "prompt": str(prompts.loc[p, "text"])}) + "\n" for p in chosen),
                 encoding="utf-8")
    ref = {}
    for p in chosen:
        q = np.percentile(lengths.loc[lengths["prompt_id"] == p, "n_tokens"], [10, 50, 90])
        ref[str(prompts.loc[p, "text"])] = "-".join(f"{v:.0f}" for v in q)
    return PromptConfig(source="jsonl", path=str(f), max_prompt_tokens=256), ref


def live_outlets(console: Console, draft: str, length_head: str, prompt: str, max_new: int) -> None:
    """One generation with the EAGLE-3 head; the OUTLETS head re-predicts the remaining length as the
    answer streams (`lenpred generate --draft D --length-head H` is the full version)."""
    from lenpred.outlets.live import GenerationSpec, live_generation
    from lenpred.report.demo import live_lines

    console.rule("[bold]OUTLETS: the remaining length, re-predicted as the answer streams")
    missing = [p for p in (draft, length_head) if not Path(p).is_dir()]
    if missing:
        console.print(f"(not committed yet: {', '.join(missing)}; see docs/draft.md and docs/outlets.md)")
        return
    console.print(f"prompt: {prompt!r} (card sampling, speculative decoding with {draft}, length head {length_head})")
    r = live_generation(prompt, GenerationSpec(draft=draft, length_head=length_head, max_new_tokens=max_new),
                        console=console)
    for line in live_lines(r):
        console.print(line)


def bench_heads(console: Console, run: str, features: str, heads: list[str]) -> None:
    """Train a few fast heads on the committed features (training split only) and bench them on the
    test split against the oracle bound on the same prompts (`lenpred bench` is the full version)."""
    import time

    from lenpred.bench import Bootstrap, evaluate
    from lenpred.predictors.pipeline import predict_run, train_on_run
    from lenpred.report.bench import render_console

    if not Path(features).is_dir():
        console.print(f"(no committed features at {features}: `lenpred features --run {run} --out {features}`)")
        return
    console.rule("[bold]length predictors on the reference run's prefill features")
    preds, names = [], []
    with tempfile.TemporaryDirectory(prefix="lenpred-demo-heads-") as tmp:
        for name in heads:
            t0 = time.perf_counter()
            train_on_run(name, None, run, features, out=Path(tmp) / name)
            p, _ = predict_run(Path(tmp) / name, run, features, ["test"])
            preds.append(p)
            names.append(name)
            console.print(f"trained {name} in {time.perf_counter() - t0:.1f} s")
    res = evaluate(run, preds, names=names, boot=Bootstrap(500))
    render_console(res, title="bench on the test split (MAE / bound: 1.0 is the best any prompt-only predictor can do)")


def print_bound(console: Console, path: str) -> None:
    """The prefill bound of the reference run, in one table (`lenpred bound` gives the full report)."""
    from lenpred.report.demo import bound_table
    from lenpred.stats import analyse_run

    try:
        s = analyse_run(path).summary
    except DataError as e:  # e.g. too few samples collected yet
        console.print(f"(bound not available yet: {e})")
        return
    console.print(bound_table(s))
    console.print("Full report with plots: lenpred bound " + path + " --out out/bound")
