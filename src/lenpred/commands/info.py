"""`lenpred info RUN`: what a run directory holds (card, progress, length summary)."""

from __future__ import annotations

import argparse
import json

from lenpred.data.rundir import RunDir
from lenpred.data.summary import print_run_summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(a: argparse.Namespace) -> int:
    rd = RunDir.open(a.run)
    if a.json:
        from lenpred.data.summary import run_summary

        print(json.dumps(run_summary(rd), indent=2))
    else:
        print_run_summary(rd)
    return 0
