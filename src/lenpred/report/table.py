"""One row model for every table a person reads: built once, rendered for the console and for Markdown.

A :class:`Table` holds cells that are already formatted text (the report decides the digits once),
so the console and ``summary.md`` can never disagree on a figure or a label.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Column", "Table", "columns_that_fit", "fmt", "fmt_ci"]


def fmt(x: Any, spec: str) -> str:
    """``format(x, spec)``, or "n/a" for a missing or non-finite figure."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return format(x, spec)


def fmt_ci(ci: Any, spec: str = ".1f") -> str:
    """``[lo, hi]``, or "n/a" when either end is missing."""
    if ci is None:
        return "n/a"
    lo, hi = ci
    if fmt(lo, spec) == "n/a" or fmt(hi, spec) == "n/a":
        return "n/a"
    return f"[{lo:{spec}}, {hi:{spec}}]"


@dataclass(frozen=True)
class Column:
    header: str
    align: Literal["left", "right"] = "right"


@dataclass(frozen=True)
class Table:
    """A titled table of text cells, with notes printed under it (a table may have only notes)."""

    title: str
    columns: tuple[Column, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: a row has {len(row)} cells for {len(self.columns)} columns")

    def to_rich(self) -> Any:
        """A :class:`rich.table.Table` (cells as plain text: brackets in figures are not markup)."""
        from rich.table import Table as RichTable
        from rich.text import Text

        t = RichTable(title=self.title)
        for c in self.columns:
            t.add_column(c.header, justify=c.align)
        for row in self.rows:
            t.add_row(*(Text(cell) for cell in row))
        return t

    def print(self, console: Any) -> None:
        from rich.text import Text

        if self.rows:
            console.print(self.to_rich())
        else:
            console.print(Text(self.title, style="italic"))
        for note in self.notes:
            console.print(Text(note), highlight=False)

    def to_markdown(self, level: int = 2) -> list[str]:
        lines = [f"{'#' * level} {self.title}", ""]
        if self.rows:
            lines.append("| " + " | ".join(_md(c.header) for c in self.columns) + " |")
            lines.append("|" + "|".join("---:" if c.align == "right" else "---" for c in self.columns) + "|")
            lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in self.rows]
            lines.append("")
        for note in self.notes:
            lines += [note, ""]
        return lines


def columns_that_fit(build: Callable[[list[int]], Any], n_columns: int, width: int,
                     drop_order: Sequence[int]) -> list[int]:
    """Indices of the columns to keep so that ``build(kept)`` (a rich renderable) fits ``width`` console
    columns unwrapped: columns leave in ``drop_order``, as few as needed (all kept when it fits)."""
    import io

    from rich.console import Console

    con = Console(file=io.StringIO(), width=100_000)  # measured unconstrained: a table shrinks to any width
    keep = list(range(n_columns))
    for i in [None, *drop_order]:
        if i is not None and i in keep:
            keep.remove(i)
        if con.measure(build(keep)).maximum <= width:
            break
    return keep


def _md(text: str) -> str:
    return text.replace("|", "\\|")
