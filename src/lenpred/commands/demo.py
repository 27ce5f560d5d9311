"""`lenpred demo`: a short live run on the embedded model, then the committed reference run.

The live part samples a few responses for a handful of ShareGPT prompts (a few minutes on two
CPU cores) and prints each prompt's lengths: the spread within one prompt is what no prompt-only
predictor can remove. The second part summarises the committed reference run, its bound and a few
fast heads; the last runs one generation with the committed EAGLE-3 head while the OUTLETS head
re-predicts the remaining length every cycle. The steps are in :mod:`lenpred.demo.steps`,
what they print in :mod:`lenpred.report.demo`.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from rich.console import Console

from lenpred.collect.base import SamplingConfig
from lenpred.data.rundir import RunDir
from lenpred.data.summary import run_summary
from lenpred.errors import ConfigError, DataError

REFERENCE = Path("data/runs/smollm2-sharegpt")
FEATURES = Path("data/features/smollm2-sharegpt")
DRAFT = Path("data/draft/smollm2-135m")
LENGTH_HEAD = Path("data/outlets/smollm2-sharegpt/outlets")
LIVE_PROMPT = "Explain how a hash table works, with a short example in Python."


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
    from lenpred.demo.steps import bench_heads, live_outlets, live_run, print_bound

    console = Console()
    engine = a.engine or ("llamacpp" if importlib.util.find_spec("llama_cpp") else "hf")
    heads = _check_inputs(a)  # before the live collection: a typo must not cost minutes
    a.reference = a.reference or str(REFERENCE)
    ref = _reference_card(Path(a.reference))
    base = ref or SamplingConfig(temperature=1.0, top_p=1.0, min_p=0.1)
    sampling = base.replace(max_new_tokens=a.max_new_tokens)
    console.rule("[bold]lenpred demo: live sampling on the embedded SmolLM2-135M-Instruct")
    console.print(f"engine={engine}, {a.prompts} ShareGPT prompts x {a.samples} samples, card: {sampling.card()}")
    live_run(console, a, engine, sampling)
    console.rule("[bold]the committed reference run")
    try:
        from lenpred.report.run_info import print_run_info

        print_run_info(run_summary(RunDir.open(a.reference)), console)
    except DataError as e:
        console.print(f"(no reference run here: {e})")
        return 0
    print_bound(console, a.reference)
    if heads:
        bench_heads(console, a.reference, a.features, heads)
    if a.length_head:
        live_outlets(console, a.draft, a.length_head, a.live_prompt, a.live_max_new_tokens)
    if not a.no_report:  # one HTML page of the reference run's results (docs/report.md)
        from lenpred.demo.report import demo_report

        console.print(f"report: {demo_report(a.reference, console=console)}")
    return 0


def _check_inputs(a: argparse.Namespace) -> list[str]:
    """The names and paths the demo reads after the live run, checked before it; returns the heads."""
    from lenpred.commands.heads import register_heads
    from lenpred.data.rundir import check_run_target
    from lenpred.io.artifacts import check_out
    from lenpred.predictors.registry import PREDICTORS

    register_heads()
    if a.run is not None:  # where the live run is kept: the overwrite rule, as `lenpred collect` applies it
        check_run_target(a.run)
        check_out(a.run, kind="run", flag="--run")
    if a.reference is not None:
        RunDir.open(a.reference)  # an explicit reference must be a run (the default is skipped when absent)
    heads = [h.strip() for h in a.heads.split(",") if h.strip()]
    for h in heads:
        PREDICTORS.get(h)  # an unknown name lists the valid ones
    return heads
