"""Command-line values the benchmarks share: comma-separated lists of numbers, and the check that an
``--out`` file holds this benchmark's own figures before it is replaced.

Each is an argparse ``type``, so a bad item is argparse's one-line error naming the flag and the form
it takes (exit 2), never a ``ValueError`` traceback::

    ap.add_argument("--seeds", type=int_list, default="0,1,2")   # a string default is parsed too
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["float_list", "int_list", "refuse_other_figures"]

T = TypeVar("T", int, float)


def _numbers(text: str, kind: Callable[[str], T], name: str, example: str) -> list[T]:
    out: list[T] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            out.append(kind(item))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not {name} -- fix: pass comma-separated {name.split()[-1]}s, "
                                             f"e.g. {example}") from None
    if not out:
        raise argparse.ArgumentTypeError(f"no value in {text!r} -- fix: pass comma-separated {name.split()[-1]}s, "
                                         f"e.g. {example}")
    return out


def int_list(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``."""
    return _numbers(text, int, "an integer", "0,1,2")


def float_list(text: str) -> list[float]:
    """``"0.9,0.95"`` -> ``[0.9, 0.95]``."""
    return _numbers(text, float, "a number", "0.9,0.95")


def refuse_other_figures(out: str | None, bench: str) -> None:
    """Exit naming the fix when ``out`` exists and is not a JSON file whose ``"bench"`` is ``bench``: a
    benchmark replaces only its own figures, checked before any work."""
    if not out or not Path(out).exists():
        return
    try:
        kind = json.loads(Path(out).read_text()).get("bench")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        kind = None
    if kind != bench:
        raise SystemExit(f"--out {out} exists and holds {kind or 'something else'}, not this benchmark's "
                         "figures -- fix: another --out")
