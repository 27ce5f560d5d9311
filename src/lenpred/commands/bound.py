"""``lenpred bound SOURCE --out DIR``: the prefill oracle bound and the stochastic-process checks.

SOURCE is a run directory (made by ``lenpred collect``) or a plain table of lengths (``.csv`` /
``.parquet``: prompt_id, n_tokens, optional stop_reason and max_new_tokens). Parse the flags
(derived from :class:`~lenpred.stats.config.BoundConfig` and the report options), call
:func:`lenpred.stats.artifact.make_bound` (which writes the artifact, with summary.md and the plots
rendered by :mod:`lenpred.report.bound`) and print the report.
"""

from __future__ import annotations

import argparse
from functools import partial

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
    from lenpred.stats.artifact import make_bound

    config = from_arguments(BoundConfig, args)
    report = from_arguments(ReportOptions, args)
    table = from_arguments(LengthTableOptions, args)
    done = make_bound(args.source, args.out or None, config, max_new_tokens=table.max_new_tokens,
                      render=partial(rendered_files, plots=report.plots, grid=report.grid))
    print_bound(done.analysis.summary, written_names(done.artifact), done.out, done.elapsed_s)
    return 0
