"""What the model-side verbs check before any work: their outputs (the overwrite rule,
:func:`lenpred.io.artifacts.check_out`), torch devices, thread counts and the limits of values that
would run away. One call at the top of ``draft``, ``outlets`` and ``generate``; the table below
says, per verb and action, what each output is and which inputs it may never land on.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lenpred.checks import check_device, check_limit, check_threads, parse_roles
from lenpred.errors import ConfigError
from lenpred.io.artifacts import check_out

__all__ = ["preflight"]


def _card(run: str | None) -> dict[str, Any] | None:
    """The run's card, to tell a rerun from another run's output; None where there is no run yet
    (the verb's own checks then say what is missing, in its words)."""
    from lenpred.data.rundir import CARD, RunDir

    return RunDir.open(run).card if run is not None and (Path(run) / CARD).is_file() else None


def _paths(items: Sequence[str] | None) -> list[str]:
    """Paths of ``[NAME=]PATH`` arguments."""
    return [it.partition("=")[2] if "=" in it else it for it in items or []]


def _draft_train(a: argparse.Namespace) -> None:
    from lenpred.data.rundir import RunDir
    from lenpred.draft.train_config import check_step_decay

    check_device(a.device)
    check_threads(a.threads)
    check_step_decay(a.step_decay)

    card = RunDir.open(a.run).card  # not a run: said first, in the run's words
    check_out(a.out, kind="draft", card=card, inputs={"--run": a.run, "--cache": a.cache, "--ckpt": a.ckpt})


def _draft_cache(a: argparse.Namespace) -> None:
    from lenpred.features.shards import parse_shard

    check_device(a.device)
    check_threads(a.threads)
    parse_roles(a.roles, "--roles")
    parse_shard(a.shard)
    if a.labels == "soft" and a.compute_dtype != "float32":
        raise ConfigError(f"--compute-dtype {a.compute_dtype} is for the hard-label states pass; soft labels (the "
                          "full pass and its log-softmax) are computed in float32",
                          "pass --labels hard, or drop --compute-dtype")


def _draft_convert(a: argparse.Namespace) -> None:
    check_out(a.out, kind="draft", inputs={"HEAD": a.head})


def _outlets_features(a: argparse.Namespace) -> None:
    if a.merge is not None:
        if a.out is None:
            raise ConfigError("--merge needs --out (the merged trajectory)",
                              "lenpred outlets features --merge SHARD_OUT... --out TRAJ")
        check_out(a.out, kind="trajectory", inputs={"--merge": a.merge})
        return
    check_device(a.device)
    check_threads(a.threads)
    if a.run is not None and a.draft is not None:  # else the verb says what is missing
        if a.out is None:
            from lenpred.outlets.pipeline import default_trajectory_out

            a.out = default_trajectory_out(a.run, a.draft, a.roles, a.shard)
        check_out(a.out, kind="trajectory", card=_card(a.run),
                  inputs={"--run": a.run, "--draft": a.draft, "--cache": a.cache})


def _outlets_train(a: argparse.Namespace) -> None:
    check_out(a.out, kind="head", card=_card(a.run), inputs={"--traj": a.traj, "--run": a.run, "--split": a.split})


def _outlets_predict(a: argparse.Namespace) -> None:
    check_out(a.out, kind="predictions", card=_card(a.run),
              inputs={"--head": a.head, "--traj": a.traj, "--run": a.run, "--split": a.split})


def _outlets_bench(a: argparse.Namespace) -> None:
    check_limit("--n-boot", a.n_boot)
    check_out(a.out, kind="outlets-bench", card=_card(a.run),
              inputs={"--traj": a.traj, "--run": a.run, "--heads": _paths(a.heads),
                      "--prefill-predictions": _paths(a.prefill_predictions), "--counters": _paths(a.counters),
                      "--split": a.split})


def _outlets_counters(a: argparse.Namespace) -> None:
    check_out(a.out, kind="outlets-counters", card=_card(a.run),
              inputs={"--run": a.run, "--prefill-predictions": _paths([a.prefill_predictions] if a.prefill_predictions
                                                                       else []), "--split": a.split})


def _generate(a: argparse.Namespace) -> None:
    check_threads(a.threads)
    if a.draft:
        check_limit("--k", a.k, "pass --k 1 to 8 (draft tokens per cycle); longer chains are rarely accepted")
    if a.tree:
        from lenpred.draft.tree import TreeSpec

        TreeSpec.parse(a.tree).check_limits()
    if a.events:
        check_out(a.events, kind="events", flag="--events",
                  inputs={"--draft": a.draft, "--length-head": a.length_head, "--prompt-file": a.prompt_file})


_TABLE: dict[tuple[str, str | None], Callable[[argparse.Namespace], None]] = {
    ("draft", "train"): _draft_train,
    ("draft", "cache"): _draft_cache,
    ("draft", "convert"): _draft_convert,
    ("outlets", "features"): _outlets_features,
    ("outlets", "train"): _outlets_train,
    ("outlets", "predict"): _outlets_predict,
    ("outlets", "bench"): _outlets_bench,
    ("outlets", "counters"): _outlets_counters,
    ("generate", None): _generate,
}


def preflight(verb: str, a: argparse.Namespace, action: str | None = None) -> None:
    """Run the checks of ``verb`` (and its ``action``) on the parsed flags; nothing when it has none."""
    check = _TABLE.get((verb, action))
    if check is not None:
        check(a)
