"""`lenpred split RUN`: write (or extend) the run's fixed train / validation / test split."""

from __future__ import annotations

import argparse

from lenpred.config import add_arguments as add_config_arguments
from lenpred.config import from_arguments
from lenpred.data.split import SPLIT_FILE, SplitConfig, build_split, write_split


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory")
    p.add_argument("--out", default=None, help=f"split file (default RUN/{SPLIT_FILE})")
    p.add_argument("--force", action="store_true", help="replace an existing split even if roles change")
    add_config_arguments(p.add_argument_group("split rule"), SplitConfig)


def run(a: argparse.Namespace) -> int:
    from lenpred.data.rundir import RunDir
    from lenpred.errors import DataError
    from lenpred.io.artifacts import check_out

    cfg = from_arguments(SplitConfig, a)
    rd = RunDir.open(a.run)
    if a.out is None and (rd.path / SPLIT_FILE).is_dir():  # no --out was passed: do not blame it
        raise DataError(f"{rd.path / SPLIT_FILE} is a directory, where the run's split file belongs",
                        f"move that directory out of the run (lenpred split writes the file {SPLIT_FILE} there), "
                        "or pass --out FILE for a split file elsewhere")
    check_out(a.out or rd.path / SPLIT_FILE, kind="split", card=rd.card, allow_inside=rd.path)
    split = build_split(rd, cfg)
    path = write_split(split, rd, a.out, force=a.force)
    c = split.counts()
    k = {r: 0 for r in c}
    from lenpred.data.lengths import sample_lengths

    s = sample_lengths(rd, with_prompts=False)
    for role in c:
        k[role] = int(s["prompt_id"].isin(split.ids(role)).sum())
    print(f"split: {path}  (card {split.card_hash})")
    for role in c:
        print(f"  {role:<5} {c[role]:>5} prompts  {k[role]:>6} samples")
    return 0
