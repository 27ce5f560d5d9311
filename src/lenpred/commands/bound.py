"""``lenpred bound SOURCE --out DIR``: the prefill oracle bound and the stochastic-process checks.

SOURCE is a run directory (made by ``lenpred collect``) or a plain table of lengths (``.csv`` /
``.parquet``: prompt_id, n_tokens, optional stop_reason and max_new_tokens). Parse the flags
(derived from :class:`~lenpred.stats.config.BoundConfig` and the report options), call
:mod:`lenpred.stats`, write the artifact (:func:`lenpred.stats.artifact.write_bound`, with summary.md and
the plots rendered by :mod:`lenpred.report.bound`) and print the report.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lenpred.config import add_arguments as add_config_arguments
from lenpred.config import from_arguments
from lenpred.report.bound import ReportOptions
from lenpred.stats.config import BoundConfig
from lenpred.stats.table import LengthTableOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", metavar="RUN_OR_TABLE",
        help="run directory (made by `lenpred collect`), or a .csv / .parquet table of lengths "
        "(prompt_id, n_tokens, optional stop_reason, max_new_tokens)",
    )
    parser.add_argument("--out", help="output directory (default: out/bound/<run or table name>)")
    add_config_arguments(parser.add_argument_group("analysis"), BoundConfig)
    add_config_arguments(parser.add_argument_group("length table"), LengthTableOptions)
    add_config_arguments(parser.add_argument_group("report"), ReportOptions)


def run(args: argparse.Namespace) -> int:
    from lenpred.report.bound import print_bound, rendered_files, written_names
    from lenpred.stats import analyse_path
    from lenpred.stats.artifact import write_bound

    config = from_arguments(BoundConfig, args)
    report = from_arguments(ReportOptions, args)
    table = from_arguments(LengthTableOptions, args)
    src = Path(args.source)
    out = Path(args.out) if args.out else Path("out/bound") / (src.stem if src.is_file() else src.resolve().name)
    _check_out(src, out)
    t0 = time.perf_counter()
    analysis = analyse_path(args.source, config, max_new_tokens=table.max_new_tokens)
    art = write_bound(analysis, out, rendered_files(analysis, plots=report.plots, grid=report.grid))
    print_bound(analysis.summary, written_names(art), out, time.perf_counter() - t0)
    return 0


def _check_out(src: Path, out: Path) -> None:
    """The overwrite rule before the analysis: a run's bound may replace only that run's bound."""
    from lenpred.data.rundir import CARD, RunDir
    from lenpred.io.artifacts import check_out
    from lenpred.stats.artifact import KIND

    card = RunDir.open(src).card if (src / CARD).is_file() else None
    check_out(out, kind=KIND, card=card, inputs={"RUN_OR_TABLE": src})
