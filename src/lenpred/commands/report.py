"""`lenpred report`: one self-contained HTML page from the results the other verbs wrote.

Sections appear when their input is given: the run card (always), the bound (``--bound``), the
predictor bench (``--bench`` of this run), transfer (``--bench`` of another run under the same model
and sampling card), OUTLETS (``--outlets``) and what the predictions are worth (``--sim``,
``--policies``, and the scheduling yardstick: ``--yardstick``, by default the committed
docs/yardstick cells). Every input is checked before anything is written (docs/report.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory the results were made from (its card is checked)")
    p.add_argument("--bound", default=None, metavar="DIR", help="`lenpred bound` output of the run")
    p.add_argument("--bench", nargs="*", default=[], metavar="DIR",
                   help="`lenpred bench` outputs: one of the run; others of runs under the same model and "
                        "sampling card make the transfer section")
    p.add_argument("--outlets", default=None, metavar="DIR", help="`lenpred outlets bench` output of the run")
    p.add_argument("--outlets-live", default=None, metavar="DIR",
                   help="another `lenpred outlets bench` output whose live series (a trajectory of live rows) heads "
                        "the OUTLETS section")
    p.add_argument("--sim", nargs="*", default=[], metavar="DIR", help="`lenpred simulate` output folders")
    p.add_argument("--policies", default=None, metavar="JSON",
                   help="policy study rows (a JSON list of {policy, predictor, load, short_p99_s, ...}); the page "
                        "names them as the full table")
    p.add_argument("--yardstick", nargs="*", default=None, metavar="PATH",
                   help="scheduling yardstick cells (*cells.jsonl of benchmarks/bench_yardstick.py, or folders "
                        "holding them); default: docs/yardstick/*-cells.jsonl; the flag alone leaves them out")
    p.add_argument("--out", required=True, help="the page to write (.html); an existing lenpred report is replaced")


def run(a: argparse.Namespace) -> int:
    from lenpred.report.page import ReportInputs, write_report

    def opt(v: str | None) -> Path | None:
        return None if v is None else Path(v)

    inputs = ReportInputs(Path(a.run), bound=opt(a.bound), bench=tuple(Path(x) for x in a.bench),
                          outlets=opt(a.outlets), outlets_live=opt(a.outlets_live), sim=tuple(Path(x) for x in a.sim), policies=opt(a.policies),
                          yardstick=None if a.yardstick is None else tuple(Path(x) for x in a.yardstick))
    res = write_report(inputs, a.out)
    print(f"report: {res.path} ({res.size / 1e6:.1f} MB; sections: {', '.join(res.sections)})")
    return 0
