"""`lenpred info RUN`: what a run directory holds (card, progress, length summary)."""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(a: argparse.Namespace) -> int:
    from lenpred.data.rundir import RunDir
    from lenpred.data.summary import run_summary
    from lenpred.report.run_info import print_run_info

    summary = run_summary(RunDir.open(a.run))
    if a.json:
        print(json.dumps(summary.to_json_dict(), indent=2))
    else:
        print_run_info(summary)
    return 0
