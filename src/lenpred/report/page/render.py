"""The report page: sections in a fixed order, laid out by one Jinja2 template, written atomically.

The page is self-contained (every figure a base64 PNG, the stylesheet inline, no script, no font or
image fetched), so it opens from a mail attachment or an artifact store. Its ``<meta
name="generator">`` marks it as a lenpred report: :func:`write_report` replaces such a file and
refuses to overwrite anything else.
"""

from __future__ import annotations

import base64
import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from lenpred import __version__
from lenpred.errors import ConfigError, DataError
from lenpred.io.fileio import atomic_write_bytes
from lenpred.report.page.inputs import Loaded, ReportInputs, load_inputs
from lenpred.report.page.model import Section
from lenpred.report.page.sections import TITLES, bench_section, bound_section, run_section, transfer_section
from lenpred.report.page.serving import outlets_section, value_section

__all__ = ["GENERATOR", "ReportResult", "build_sections", "render_html", "write_report", "is_report"]

GENERATOR = "lenpred report"
MARKER = f'<meta name="generator" content="{GENERATOR}'.encode()
# what to pass for a section that is missing (shown at the top of the page)
FLAGS = {"bound": "--bound", "bench": "--bench", "transfer": "--bench of another run", "outlets": "--outlets",
         "value": "--sim, --policies or --yardstick"}


@dataclass(frozen=True)
class ReportResult:
    path: Path
    size: int  # bytes
    sections: tuple[str, ...]  # ids, in page order


def build_sections(loaded: Loaded) -> list[Section]:
    """Every section whose input is there, in the page's order."""
    secs = [run_section(loaded.run)]
    if loaded.bound is not None:
        secs.append(bound_section(*loaded.bound))
    if loaded.bench is not None:
        secs.append(bench_section(loaded.bench, loaded.run))
        if loaded.transfer:
            secs.append(transfer_section(loaded.bench, loaded.transfer))
    if loaded.outlets is not None:
        secs.append(outlets_section(*loaded.outlets, live_art=loaded.outlets_live))
    if loaded.sims or loaded.policies is not None or loaded.yardstick is not None:
        pol = None if loaded.inputs.policies is None else str(loaded.inputs.policies)
        secs.append(value_section(loaded.sims, loaded.policies, pol, loaded.yardstick))
    return secs


def _environment():  # type: ignore[no-untyped-def]
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(loader=PackageLoader("lenpred.report", "templates"), autoescape=select_autoescape(["j2", "html"]),
                      undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["b64"] = lambda data: base64.b64encode(data).decode("ascii")
    return env


def render_html(loaded: Loaded, sections: list[Section]) -> str:
    have = {s.id for s in sections}
    return _environment().get_template("report.html.j2").render(
        generator=f"{GENERATOR} {__version__}",
        run_name=loaded.run.path.name,
        run_path=str(loaded.inputs.run),
        card_hash=loaded.run.card_hash,
        version=__version__,
        created=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        sections=sections,
        missing=[f"{TITLES[k].lower()} ({flag})" for k, flag in FLAGS.items() if k not in have],
    )


def is_report(path: Path) -> bool:
    """True for a file this command wrote (its head carries the generator mark)."""
    try:
        with open(path, "rb") as f:
            return MARKER in f.read(4096)
    except OSError:
        return False


def check_out(out: Path, inputs: ReportInputs) -> None:
    """Refuse an output path before any work: not .html, or a file that is not a lenpred report; the
    rest of lenpred's overwrite rule (:func:`lenpred.io.outputs.check_out`) for a new path: not one of
    the inputs, not inside a run directory or an artifact, in a folder that can be written."""
    from lenpred.io.outputs import check_out as overwrite_rule

    if out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out {out} is not an .html file", "pass e.g. --out report.html")
    if out.is_file() and is_report(out):
        return  # an earlier page: replaced
    if out.is_file() and out.stat().st_size:
        raise DataError(f"--out {out} exists and is not a lenpred report; it is left as it is",
                        "pass a new path, or move that file away")
    overwrite_rule(out, kind="report", inputs={
        "--run": inputs.run, "--bound": inputs.bound, "--bench": inputs.bench, "--outlets": inputs.outlets,
        "--outlets-live": inputs.outlets_live,
        "--sim": inputs.sim, "--policies": inputs.policies, "--yardstick": inputs.yardstick or ()})


def write_report(inputs: ReportInputs, out: str | os.PathLike[str]) -> ReportResult:
    """Load and check every input, build the page and write it atomically to ``out``."""
    dest = Path(out)
    check_out(dest, inputs)
    loaded = load_inputs(inputs)
    sections = build_sections(loaded)
    data = render_html(loaded, sections).encode("utf-8")
    atomic_write_bytes(dest, data)
    return ReportResult(dest, len(data), tuple(s.id for s in sections))

