"""The report ``lenpred demo`` ends with: the reference run's inputs made by the verbs, then the page.

:func:`demo_report` runs ``lenpred bound``, ``lenpred predict`` (each committed head of the run, on
its test prompts) and ``lenpred bench`` on the reference run -- and on a second committed run under
the same card when there is one (transfer) -- then ``lenpred simulate`` on the run's test samples
(first-come-first-served against shortest-predicted-first with the ridge head and with the true
lengths), into ``out/report/<run>/``; adds the committed OUTLETS bench and policy table where they
match, and writes ``report.html`` beside them. The verbs run through the CLI entry point (their
output goes to ``log.txt``) so the page shows, for each section, the exact command that made its input.
It runs verbs through the CLI, so it lives beside the report library (which does not import the CLI), not in it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from lenpred.errors import DataError, LenpredError
from lenpred.report.page.inputs import ReportInputs, command_line
from lenpred.report.page.render import write_report

__all__ = ["demo_report"]

REFERENCE = Path("data/runs/smollm2-sharegpt")
TRANSFER = Path("data/runs/smollm2-alpaca-eval")
HEADS = Path("data/heads")
FEATURES = Path("data/features")
OUTLETS = Path("docs/outlets_real")
OUTLETS_LIVE = Path("docs/outlets_real_live_full")  # the live series on every test sample: the headline
POLICIES = Path("docs/policies/policies.json")


def _verb(argv: list[str], log: Path, console: Any = None) -> None:
    """Run one lenpred verb in-process, its console output appended to ``log``."""
    import io

    from lenpred.cli import main

    if console is not None:
        console.print(f"$ {command_line(['lenpred', *argv])}", highlight=False, soft_wrap=True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {command_line(['lenpred', *argv])}\n{buf.getvalue()}\n")
    if rc != 0:
        raise DataError(f"`{command_line(['lenpred', *argv])}` failed (exit {rc})", f"see the message above and {log}")


def _bench(run: Path, head_run: str, out: Path, log: Path, console: Any) -> Path | None:
    """Predict the test prompts of ``run`` with every committed head trained on ``head_run``, then bench them."""
    feats = FEATURES / run.name
    heads = sorted(HEADS.glob(f"*-{head_run}"))
    if not heads or not feats.is_dir() or not (run / "split.json").is_file():
        return None
    preds = []
    for h in heads:
        name = h.name[: -len(head_run) - 1]
        dest = out / "preds" / run.name / f"{name}.parquet"
        _verb(["predict", "--head", str(h), "--run", str(run), "--features", str(feats), "--roles", "test",
               "--out", str(dest)], log, console)
        preds.append(f"{name}={dest}")
    bench = out / f"bench-{run.name}"
    _verb(["bench", "--run", str(run), "--predictions", *preds, "--n-boot", "500", "--out", str(bench)], log, console)
    return bench


def _simulate(run: Path, out: Path, log: Path, console: Any) -> Path | None:
    """The run's test samples served by late binding first-come-first-served (the baseline: no prediction),
    and shortest-predicted-first in the same queue with the ridge head's predictions and with the true
    lengths, around the cluster's saturation throughput; FCFS + round robin beside them for reference."""
    preds = out / "preds" / run.name / "ridge.parquet"
    if not preds.is_file():
        return None
    cfg = {
        "name": f"{run.name}-test", "seed": 0,
        "cluster": {"mode": "disaggregated", "n_prefill": 4, "n_decode": 8, "profile": "llama8b-h100"},
        "workload": {"n_requests": 20000, "arrival": {"process": "poisson"},
                     "lengths": {"source": "rundir", "path": str(run), "roles": ["test"]}},
        "prediction": {"model": "table", "path": str(preds)},
        # FCFS + round robin a reference column; the baseline is the best prediction-free arm (issue 37):
        # late binding, max_outstanding = the profile's batch limit (256)
        "policies": [
            {"name": "fcfs+rr", "queue": "fcfs", "dispatch": "round-robin"},
            {"name": "fcfs late", "queue": "fcfs", "dispatch": "least-requests", "max_outstanding": 256},
            {"name": "sjf late ridge", "queue": {"name": "sjf", "aging": 100}, "dispatch": "least-requests",
             "max_outstanding": 256},
            {"name": "sjf late true lengths", "queue": {"name": "sjf", "aging": 100}, "dispatch": "least-requests",
             "max_outstanding": 256, "prediction": {"model": "oracle"}},
        ],
        "sweep": {"loads": [0.9, 1.0, 1.1, 1.2], "load_unit": "capacity", "probe_requests": 4000,
                  "baseline": "fcfs late"},
        "plots": False,
    }
    (out / "sim.json").write_text(json.dumps(cfg, indent=2) + "\n")
    _verb(["simulate", "--config", str(out / "sim.json"), "--out", str(out / "sim"), "--quiet"], log, console)
    return out / "sim"


def _matches(path: Path, run: Path) -> bool:
    """A committed input is added only where it is of this run (checked as the report checks it)."""
    from lenpred.report.page.inputs import load_inputs

    try:
        load_inputs(ReportInputs(run, outlets=path if path.is_dir() else None,
                                 policies=path if path.is_file() else None))
    except LenpredError:
        return False
    return path.exists()


def demo_report(reference: str | os.PathLike[str] = REFERENCE, out_dir: str | os.PathLike[str] = "out/report",
                console: Any = None) -> Path:
    """Make the reference run's report inputs with the verbs and write its page; returns the page's path.

    ``console`` (rich): print each command as it starts (a few minutes on two CPU cores)."""
    run = Path(reference)
    out = Path(out_dir) / run.name
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    log.write_text("")
    if console is not None:
        console.rule("[bold]the report: one HTML page of the reference run's results")
    _verb(["bound", str(run), "--out", str(out / "bound")], log, console)
    benches = [b for b in (_bench(run, run.name, out, log, console),) if b is not None]
    if benches and TRANSFER.is_dir() and TRANSFER.resolve() != run.resolve():
        other = _bench(TRANSFER, run.name, out, log, console)
        benches += [other] if other is not None else []
    sim = _simulate(run, out, log, console)
    inputs = ReportInputs(run, bound=out / "bound", bench=tuple(benches),
                          outlets=OUTLETS if _matches(OUTLETS, run) else None,
                          outlets_live=OUTLETS_LIVE if _matches(OUTLETS_LIVE, run) else None,
                          sim=() if sim is None else (sim,),
                          policies=POLICIES if _matches(POLICIES, run) else None)
    return write_report(inputs, out / "report.html").path
