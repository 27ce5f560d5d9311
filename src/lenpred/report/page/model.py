"""What one section of the report page holds: text, verdicts, tables and figures, already formatted.

Section builders (:mod:`lenpred.report.page.sections`, :mod:`lenpred.report.page.serving`) fill
these from typed results; :mod:`lenpred.report.page.render` lays them out with the page template.
Nothing here computes or formats a figure.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lenpred.report.table import Table

__all__ = ["Figure", "Section", "Verdict", "figure_from_pyplot", "figures_from_writer"]


@dataclass(frozen=True)
class Figure:
    """One image, inlined into the page as a base64 PNG."""

    name: str  # the file name the verb writes it under (shown under the figure)
    caption: str
    png: bytes


@dataclass(frozen=True)
class Verdict:
    claim: str
    status: str  # supported | not supported | inconclusive | ...
    detail: str


@dataclass
class Section:
    """One section of the page; ``id`` is its anchor, ``title`` its heading."""

    id: str
    title: str
    commands: list[str] = field(default_factory=list)  # what made the section's inputs
    sources: list[str] = field(default_factory=list)  # the input paths, as given
    paragraphs: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


def figures_from_writer(write: Callable[[Path], list[Path]], captions: dict[str, str]) -> list[Figure]:
    """Run a ``write_plots(out_dir)``-style function of the other verbs into a temporary folder and
    keep its PNGs (in the order written), so the page draws exactly what the verb draws."""
    import tempfile

    out = []
    with tempfile.TemporaryDirectory(prefix="lenpred-report-") as tmp:
        for p in write(Path(tmp)):
            out.append(Figure(p.name, captions.get(p.name, p.stem.replace("_", " ")), p.read_bytes()))
    return out


def figure_from_pyplot(fig: Any, name: str, caption: str, dpi: int = 110) -> Figure:
    """A pyplot figure as a :class:`Figure` (closed afterwards)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return Figure(name, caption, buf.getvalue())
