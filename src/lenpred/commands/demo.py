"""`lenpred demo`: a short live run on the embedded model, then the committed reference run.

The live part samples a few responses for a handful of ShareGPT prompts (a few minutes on two
CPU cores) and prints each prompt's lengths: the spread within one prompt is what no prompt-only
predictor can remove. The second part summarises the committed reference run, its bound and a few
fast heads; the last runs one generation with the committed EAGLE-3 head while the OUTLETS head
re-predicts the remaining length every cycle.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

from rich.console import Console

from lenpred.collect.base import SamplingConfig
from lenpred.collect.runner import CollectConfig, collect
from lenpred.data.rundir import RunDir
from lenpred.data.sources import PromptConfig
from lenpred.data.summary import run_summary
from lenpred.errors import ConfigError, DataError

REFERENCE = Path("data/runs/smollm2-sharegpt")
FEATURES = Path("data/features/smollm2-sharegpt")
DRAFT = Path("data/draft/smollm2-135m")
LENGTH_HEAD = Path("data/outlets/smollm2-sharegpt/outlets")
LIVE_PROMPT = "Explain how a hash table works, with a short example in Python."
DEMO_OPTIONS: dict[str, dict[str, int]] = {"llamacpp": {"n_parallel": 8}, "hf": {"batch_size": 8}}
# The live run's prompts: self-contained first turns of the reference run with 24 samples each, none
# cut at 512 tokens there and the widest p10-p90 spreads (so the table shows variation, not the cap).
LIVE_PROMPTS = ("jKSr8HV_0", "41mEEkg_0", "6o9RgvW_0", "vPCoJiz_0", "SyKu2Hj_0", "dCCdNuu_0")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", type=int, default=6, help="live prompts (default 6)")
    p.add_argument("--samples", type=int, default=3, help="samples per live prompt (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="cap for the live run (default 512)")
    p.add_argument("--engine", default=None, help="hf | llamacpp (default: llamacpp if installed, else hf)")
    p.add_argument("--run", default=None, help="keep the live run here (default: a temporary directory)")
    p.add_argument("--reference", default=None, help=f"reference run to summarise (default {REFERENCE}, skipped "
                                                     "when it is not there)")
    p.add_argument("--features", default=str(FEATURES), help=f"its committed prefill features (default {FEATURES})")
    p.add_argument("--heads", default="constant,prompt-length,ridge",
                   help="fast heads trained on the committed features and benched (comma-separated; '' = none)")
    p.add_argument("--draft", default=str(DRAFT), help=f"EAGLE-3 head for the live OUTLETS part (default {DRAFT})")
    p.add_argument("--length-head", default=str(LENGTH_HEAD),
                   help=f"OUTLETS length head for the live part (default {LENGTH_HEAD}; '' = skip the part)")
    p.add_argument("--live-prompt", default=LIVE_PROMPT, help="the live OUTLETS generation's user message")
    p.add_argument("--live-max-new-tokens", type=int, default=256, help="cap for the live OUTLETS generation")
    p.add_argument("--no-report", action="store_true", help="skip the HTML report of the reference run at the end")


def _reference_card(path: Path) -> SamplingConfig | None:
    try:
        return SamplingConfig.from_dict(RunDir.open(path).card["sampling"], "reference card sampling")
    except (DataError, ConfigError):
        return None


def run(a: argparse.Namespace) -> int:
    from rich.table import Table

    console = Console()
    engine = a.engine or ("llamacpp" if importlib.util.find_spec("llama_cpp") else "hf")
    heads = _check_inputs(a)  # before the live collection: a typo must not cost minutes
    a.reference = a.reference or str(REFERENCE)
    ref = _reference_card(Path(a.reference))
    base = ref or SamplingConfig(temperature=1.0, top_p=1.0, min_p=0.1)
    sampling = base.replace(max_new_tokens=a.max_new_tokens)
    console.rule("[bold]lenpred demo: live sampling on the embedded SmolLM2-135M-Instruct")
    console.print(f"engine={engine}, {a.prompts} ShareGPT prompts x {a.samples} samples, card: {sampling.card()}")
    with tempfile.TemporaryDirectory(prefix="lenpred-demo-") as tmp:
        run_dir = a.run or str(Path(tmp) / "demo")
        prompt_cfg, ref_lengths = _live_prompts(Path(a.reference), a.prompts, Path(tmp))
        cfg = CollectConfig.from_dict(
            {
                "run_dir": run_dir,
                "engine": engine,
                "prompts": prompt_cfg,
                "sampling": sampling,
                "n_prompts": a.prompts,
                "samples": a.samples,
                "engine_options": DEMO_OPTIONS.get(engine, {}),
            }
        )
        s = collect(cfg)
        rd = RunDir.open(run_dir)
        prompts = rd.prompts()
        samples = rd.samples(columns=["prompt_id", "sample_idx", "n_tokens", "stop_reason"])
    t = Table(title=f"per-prompt decode lengths ({s.new_tokens} tokens in {s.seconds:.0f} s, {s.tokens_per_s:.1f} tok/s)")
    for col in ("prompt", "prompt tok", "lengths (* = hit the cap)", "mean", "sd", "reference p10-p50-p90"):
        t.add_column(col)
    for p in prompts.itertuples():
        g = samples[samples.prompt_id == p.prompt_id].sort_values("sample_idx")
        lens = g.n_tokens.to_numpy()
        marks = ", ".join(f"{n}{'*' if r == 'length' else ''}" for n, r in zip(lens, g.stop_reason, strict=True))
        short = " ".join(str(p.text).split())[:48]
        t.add_row(short, str(p.n_prompt_tokens), marks, f"{lens.mean():.0f}", f"{lens.std(ddof=1):.0f}" if len(lens) > 1 else "-",
                  ref_lengths.get(str(p.text), "-"))
    console.print(t)
    console.print("The same prompt, the same card: lengths still vary (the reference column: 24 samples of each in the "
                  "committed run). That spread bounds every prompt-only predictor.")
    console.rule("[bold]the committed reference run")
    try:
        from lenpred.report.run_info import print_run_info

        print_run_info(run_summary(RunDir.open(a.reference)), console)
    except DataError as e:
        console.print(f"(no reference run here: {e})")
        return 0
    _print_bound(console, a.reference)
    if heads:
        _bench_heads(console, a.reference, a.features, heads)
    if a.length_head:
        _live_outlets(console, a.draft, a.length_head, a.live_prompt, a.live_max_new_tokens)
    if not a.no_report:  # one HTML page of the reference run's results (docs/report.md)
        from lenpred.commands.demo_report import demo_report

        console.print(f"report: {demo_report(a.reference, console=console)}")
    return 0


def _live_prompts(reference: Path, n: int, tmp: Path) -> tuple[PromptConfig, dict[str, str]]:
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


def _check_inputs(a: argparse.Namespace) -> list[str]:
    """The names and paths the demo reads after the live run, checked before it; returns the heads."""
    from lenpred.artifacts import check_out
    from lenpred.data.rundir import check_run_target
    from lenpred.predictors.registry import PREDICTORS

    if a.run is not None:  # where the live run is kept: the overwrite rule, as `lenpred collect` applies it
        check_run_target(a.run)
        check_out(a.run, kind="run", flag="--run")
    if a.reference is not None:
        RunDir.open(a.reference)  # an explicit reference must be a run (the default is skipped when absent)
    heads = [h.strip() for h in a.heads.split(",") if h.strip()]
    for h in heads:
        PREDICTORS.get(h)  # an unknown name lists the valid ones
    return heads


def _live_outlets(console: Console, draft: str, length_head: str, prompt: str, max_new: int) -> None:
    """One generation with the EAGLE-3 head; the OUTLETS head re-predicts the remaining length as the
    answer streams (`lenpred generate --draft D --length-head H` is the full version)."""
    from lenpred.outlets.live import live_generation

    console.rule("[bold]OUTLETS: the remaining length, re-predicted as the answer streams")
    missing = [p for p in (draft, length_head) if not Path(p).is_dir()]
    if missing:
        console.print(f"(not committed yet: {', '.join(missing)}; see docs/draft.md and docs/outlets.md)")
        return
    console.print(f"prompt: {prompt!r} (card sampling, speculative decoding with {draft}, length head {length_head})")
    r = live_generation(draft=draft, length_head=length_head, prompt=prompt, max_new_tokens=max_new,
                        console=console)
    console.print(" ".join(r.text.split())[:300] + (" ..." if len(r.text) > 300 else ""))
    errs = r.errors()
    if r.points:
        first, mid = r.points[0], r.points[len(r.points) // 2]
        cap = " (hit the cap: the answer would have been longer)" if r.stop_reason == "length" else ""
        console.print(f"true length {r.n_tokens}{cap}; predicted total at {first.n_generated} tokens: "
                      f"{first.total:.0f} (error {errs[0]:+.0f}), at {mid.n_generated}: {mid.total:.0f} "
                      f"(error {errs[len(errs) // 2]:+.0f}); tau {r.tau:.2f}")
    if r.head_ms_per_cycle is not None and r.target_ms_per_pass:
        console.print(f"the length head cost {r.head_ms_per_cycle:.2f} ms per cycle = "
                      f"{100 * r.head_ms_per_cycle / r.target_ms_per_pass:.2f}% of a target pass here")


def _bench_heads(console: Console, run: str, features: str, heads: list[str]) -> None:
    """Train a few fast heads on the committed features (training split only) and bench them on the
    test split against the oracle bound on the same prompts (`lenpred bench` is the full version)."""
    import time

    from lenpred.bench import evaluate
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
    res = evaluate(run, preds, names=names, n_boot=500)
    render_console(res, title="bench on the test split (MAE / bound: 1.0 is the best any prompt-only predictor can do)")


def _print_bound(console: Console, path: str) -> None:
    """The prefill bound of the reference run, in one table (`lenpred bound` gives the full report)."""
    from rich.table import Table

    from lenpred.stats import analyse_run

    try:
        s = analyse_run(path).summary
    except DataError as e:  # e.g. too few samples collected yet
        console.print(f"(bound not available yet: {e})")
        return
    v = s.headline_bound
    lo, hi = v.oracle_mae_ci
    rlo, rhi = v.relative_mae_ci
    t = Table(title=f"prefill bound on the reference run ({v.n_prompts} prompts, {v.n_samples} samples; {v.label})")
    t.add_column("what")
    t.add_column("value")
    t.add_row("oracle MAE: no prompt-only predictor can beat it", f"{v.oracle_mae:.0f} tokens [{lo:.0f}, {hi:.0f}]")
    t.add_row("relative to the mean length", f"{v.relative_mae:.2f} [{rlo:.2f}, {rhi:.2f}]")
    for claim, verdict in s.verdicts.items():
        t.add_row(claim.replace("_", " "), verdict.status)
    console.print(t)
    console.print("Full report with plots: lenpred bound " + path + " --out out/bound")
