"""The scheduling yardstick read at a glance (issues 30 and 37): per regime group, five arms on a Pareto plane.

The rows are the yardstick's cells (``benchmarks/bench_yardstick.py`` writes one JSON line per cell
and seed: ``docs/yardstick/episodes-cells.jsonl``, ``docs/yardstick/steady-cells.jsonl``), each with
every arm's short-request and overall P99 (and short P50, SLO attainment). A *group* is a regime, a
cluster and a batch limit (steady loads 0.90-0.99 at batch 16; overload episodes of 1 + 2 at batch
256; ...); its *pairs* are its (load or episode, arrival, seed) cells.

Every figure is a ratio to the **best prediction-free arm** of the same pair (:func:`reference`: the rule of
:func:`lenpred.sim.yardstick.best_free` over the arms with no predictor, ``/-``, that are stable there): the
strongest scheduler a router runs without a prediction (join-shortest-queue, late binding, ...), not round
robin. An arm's figure is the median over the group's pairs, with the min and max.

The five arms of a group (:func:`choose`):

* ``best prediction-free``, the reference (1.0 by definition; which arm it was in each pair is in the
  group's ``references``);
* ``fcfs+rr/-``, FCFS + round robin, kept as a reference column: what the reference gains over it;
* the default: the recommended policy and the router's default (:data:`lenpred.sched.recommended.RECOMMENDED`:
  late-binding FCFS, ``fcfs late/-``), where the yardstick ran it;
* the best real-predictor arm (predictor ``mlp``, ``samples`` or ``outlets``; not the default): the
  smallest median short-P99 ratio among arms whose overall P99 is at most 1.05x the reference's in every pair;
* the true-length ceiling: the best ``/true`` arm under the same overall constraint.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from lenpred.errors import DataError
from lenpred.sched.recommended import RECOMMENDED

__all__ = ["BASELINE", "GOAL_SHORT", "MAX_OVERALL", "MAKE_COMMAND", "NEVER_WORSE", "REFERENCE", "ROLES", "ArmStats",
           "Group", "Pick", "Span", "choose", "default_paths", "load_cells", "read_cells", "reference", "summarize"]

BASELINE = "fcfs+rr/-"
REFERENCE = "best prediction-free"  # the synthetic arm: per pair, the figures of the arm reference() picks
MAX_OVERALL = 1.05  # an arm's overall P99 at most this x the reference's, in every pair
GOAL_SHORT = 0.80  # issue 37's goal: the short P99 cut >= 20% against the reference (at overall <= MAX_OVERALL)
NEVER_WORSE = 1.02  # the default's promise: short and overall P99 <= 1.02x the reference's
REAL_PREDICTORS = ("mlp", "samples", "outlets")
ROLES = ("best prediction-free", "FCFS + RR", "default", "best real predictor", "true-length ceiling")
CELL_FILES = ("steady-cells.jsonl", "episodes-cells.jsonl")
MAKE_COMMAND = ("python -m benchmarks.bench_yardstick --regimes steady --clusters 1+2 --batches 16,256 --arms \"$ARMS\" "
                "--work out/yardstick-steady --out docs/yardstick/steady (and --regimes episode: docs/yardstick/README.md "
                "gives $ARMS and both runs), then pass --yardstick out/yardstick-steady")


# ------------------------------------------------------------------------------------------ rows
class _Figures(BaseModel):
    model_config = ConfigDict(extra="allow")

    short_p99_s: float | None
    p99_s: float | None
    short_p50_s: float | None = None
    attain_all: float | None = None
    drained: bool = True


class _Cell(BaseModel):
    model_config = ConfigDict(extra="allow")

    regime: str
    cluster: str
    batch: int
    where: str
    arrival: str = "-"
    seed: int


class _Row(BaseModel):
    model_config = ConfigDict(extra="allow")

    cell: _Cell
    arms: dict[str, _Figures]
    diverging: list[str] = []


def _object(line: str, where: str, partial: bool = False) -> dict[str, Any] | None:
    """One line of a cells file as the JSON object it holds. ``partial`` (a work file a run is still
    appending to): ``None`` for a line that a kill cut short, or that is no cell row (no ``key``)."""
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        if partial:
            return None
        raise DataError(f"{where} is not JSON ({e.msg})",
                        "re-create the file with benchmarks/bench_yardstick.py") from None
    if not isinstance(d, dict) or (partial and "key" not in d):
        if partial:
            return None
        raise DataError(f"{where} is not a JSON object", "each line is one cell row of benchmarks/bench_yardstick.py")
    return d


def _lines(path: Path, partial: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, the JSON object) of each cell row of one cells file, in file order: the one place the
    file format is read (see :func:`read_cells` for ``partial``)."""
    if partial and not path.is_file():
        return
    for i, line in enumerate(_text(path).splitlines(), 1):
        where = f"{path} line {i}"
        d = _object(line, where, partial) if line.strip() else None
        if d is not None:
            yield where, d


def _parse(d: dict[str, Any], where: str) -> _Row | None:
    """One cell row, validated; ``None`` for a goodput row (no per-arm P99 to read)."""
    if isinstance(d.get("cell"), dict) and d["cell"].get("regime") == "goodput":
        return None
    try:
        row = _Row.model_validate(d)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise DataError(f"{where}: {loc}: {err['msg']}",
                        "each line is one cell row of benchmarks/bench_yardstick.py {cell, arms, ...}") from None
    base = row.arms.get(BASELINE)
    if base is None or not base.short_p99_s or not base.p99_s:
        raise DataError(f"{where} has no {BASELINE} arm with a positive short_p99_s and p99_s",
                        f"every ratio is to {BASELINE}: run the yardstick with it in --arms")
    return row


def _text(f: Path) -> str:
    """A cells file's text: UTF-8 JSON lines; another encoding is refused naming the line and byte."""
    data = f.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"{f} line {line}: byte 0x{data[e.start]:02x} at byte offset {e.start} is not UTF-8, so it "
                        "is not a yardstick cells file", "pass a *cells.jsonl written by benchmarks/bench_yardstick.py "
                        "(UTF-8 JSON lines)") from None


def load_cells(paths: Sequence[Path]) -> list[_Row]:
    """The rows of these cells files (``.jsonl``, one cell per line), or of a folder's
    ``*cells.jsonl``; a cell (regime, cluster, batch, where, arrival, seed) read twice counts once."""
    rows: dict[tuple[Any, ...], _Row] = {}
    for path in paths:
        files = sorted(path.glob("*cells.jsonl")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise DataError(f"--yardstick {path}: no yardstick cells file there",
                            f"pass a cells .jsonl or a folder holding *cells.jsonl; make one with {MAKE_COMMAND}")
        for f in files:
            for where, d in _lines(f):
                row = _parse(d, where)
                if row is not None:
                    c = row.cell
                    rows.setdefault((c.regime, c.cluster, c.batch, c.where, c.arrival, c.seed), row)
    return list(rows.values())


def read_cells(path: Path, *, partial: bool = False) -> list[dict[str, Any]]:
    """Every row of one cells file as written, goodput rows and every field included, in file order:
    what the yardstick's own report and sizing read (:func:`load_cells` validates the rows the page reads).

    ``partial=True`` reads a run's work file (``WORK/cells.jsonl`` of benchmarks/bench_yardstick.py) that
    a run may still be appending to or was killed writing: a missing file has no rows yet, and a line that
    is not a whole cell row (JSON object with a ``key``) is skipped, so that cell runs again. Without it
    such a line is a :class:`~lenpred.errors.DataError` naming the line."""
    return [d for _, d in _lines(path, partial)]


def default_paths(roots: Iterable[Path] | None = None) -> list[Path]:
    """The committed cells files under ``docs/yardstick`` of the source tree (else of the working
    folder), in :data:`CELL_FILES` order; empty when there are none."""
    if roots is None:
        roots = (Path(__file__).resolve().parents[3], Path.cwd())
    for root in roots:
        found = [root / "docs" / "yardstick" / name for name in CELL_FILES]
        found = [p for p in found if p.is_file()]
        if found:
            return found
    return []


# ------------------------------------------------------------------------------------------ figures
@dataclass(frozen=True)
class Span:
    median: float
    lo: float
    hi: float
    n: int

    @staticmethod
    def of(xs: Sequence[float]) -> Span | None:
        return Span(statistics.median(xs), min(xs), max(xs), len(xs)) if xs else None


@dataclass(frozen=True)
class ArmStats:
    """One arm over a group's pairs: ratios to the pair's best prediction-free arm (attainment as it is, a share)."""

    arm: str
    short_p99: Span
    overall_p99: Span
    short_p50: Span | None
    attain: Span | None
    pairs: int
    diverging: int  # pairs where the arm diverged (steady) or did not drain (episode)
    n_within: int  # pairs where its overall P99 <= MAX_OVERALL x the reference's
    n_goal: int = 0  # pairs where its short P99 <= GOAL_SHORT x the reference's within the overall constraint
    n_never_worse: int = 0  # pairs where its short and overall P99 are both <= NEVER_WORSE x the reference's

    @property
    def within(self) -> bool:
        """Overall P99 within the constraint in every pair."""
        return self.n_within == self.pairs

    @property
    def policy(self) -> str:
        return self.arm.rsplit("/", 1)[0]

    @property
    def predictor(self) -> str:
        return self.arm.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Pick:
    role: str  # one of ROLES
    stats: ArmStats
    strict: bool = True  # False: no arm met the overall constraint in every pair; this one does in the most


@dataclass(frozen=True)
class Group:
    regime: str
    cluster: str
    batch: int
    places: tuple[str, ...]  # the loads or episodes (with the arrival process)
    seeds: int
    pairs: int
    picks: tuple[Pick, ...]
    notes: tuple[str, ...]
    references: tuple[tuple[str, int], ...] = ()  # (prediction-free arm, pairs where it was the reference)

    @property
    def label(self) -> str:
        what = "steady loads" if self.regime == "steady" else "overload episodes" if self.regime == "episode" \
            else self.regime
        return f"{what}, {self.cluster} cluster, batch {self.batch}"

    @property
    def slug(self) -> str:
        return f"{self.regime}_{self.cluster.replace('+', 'p')}_b{self.batch}"


def _ratio(x: float | None, base: float | None) -> float | None:
    return None if x is None or not base else x / base


def _unstable(row: _Row) -> set[str]:
    """The arms of a row with no steady value (named in ``diverging``) or whose backlog outlived the episode."""
    named = {d.rsplit(" ", 1)[0] for d in row.diverging}
    return named | {a for a, f in row.arms.items() if not f.drained}


def reference(row: _Row | dict[str, Any]) -> str:
    """The row's best prediction-free arm: :func:`lenpred.sim.yardstick.best_free` over its ``/-`` arms that are
    stable there (FCFS + RR always is a candidate). ``row``: a validated row, or one as the cells file holds it."""
    from lenpred.sim.yardstick import best_free

    if isinstance(row, dict):
        row = _Row.model_validate(row)
    bad = _unstable(row) - {BASELINE}
    free = [a for a in row.arms if a.endswith("/-") and a not in bad]
    return best_free({a: f.model_dump() for a, f in row.arms.items() if a in free}, free)


def arm_stats(rows: Sequence[_Row], refs: dict[str, int] | None = None) -> dict[str, ArmStats]:
    """Every arm of these rows (one group) over its pairs, as ratios to each pair's :func:`reference`, which
    also appears as the arm :data:`REFERENCE`; ``refs`` (if given) counts which arm the reference was."""
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    div: dict[str, int] = defaultdict(int)
    for row in rows:
        ref = reference(row)
        if refs is not None:
            refs[ref] = refs.get(ref, 0) + 1
        base = row.arms[ref]
        unstable = _unstable(row)
        for arm, f in [*row.arms.items(), (REFERENCE, base)]:
            p = per[arm]
            p["n"].append(1.0)
            for key, x, b in (("short", f.short_p99_s, base.short_p99_s), ("overall", f.p99_s, base.p99_s),
                              ("p50", f.short_p50_s, base.short_p50_s)):
                r = _ratio(x, b)
                if r is not None:
                    p[key].append(r)
            over = f.p99_s is None or f.p99_s > MAX_OVERALL * base.p99_s  # type: ignore[operator]
            p["over"].append(float(over))
            short = _ratio(f.short_p99_s, base.short_p99_s)
            overall = _ratio(f.p99_s, base.p99_s)
            p["goal"].append(float(not over and short is not None and short <= GOAL_SHORT))
            p["never_worse"].append(float(short is not None and overall is not None and short <= NEVER_WORSE
                                          and overall <= NEVER_WORSE))
            if f.attain_all is not None:
                p["attain"].append(f.attain_all)
            div[arm] += int(arm in unstable or not f.drained)
    out = {}
    for arm, p in per.items():
        short, overall = Span.of(p["short"]), Span.of(p["overall"])
        if short is None or overall is None:
            continue  # no short or overall P99 in any pair: nothing to place
        out[arm] = ArmStats(arm, short, overall, Span.of(p["p50"]), Span.of(p["attain"]), len(p["n"]), div[arm],
                            len(p["over"]) - int(sum(p["over"])), int(sum(p["goal"])), int(sum(p["never_worse"])))
    return out


def _best(cands: Iterable[ArmStats]) -> ArmStats | None:
    ok = sorted(cands, key=lambda s: (s.short_p99.median, s.overall_p99.median, s.arm))
    return ok[0] if ok else None


def _constrained(role: str, cands: Sequence[ArmStats], what: str, notes: list[str]) -> Pick | None:
    """The best of ``cands`` within the overall constraint in every pair; where none is, the one within
    it in the most pairs (then the best), marked not strict and noted."""
    best = _best(s for s in cands if s.within)
    if best is not None:
        return Pick(role, best)
    most = max((s.n_within for s in cands), default=0)
    if most == 0:
        notes.append(f"no {what} keeps its overall P99 within {MAX_OVERALL:g}x the best prediction-free arm's in any pair")
        return None
    best = _best(s for s in cands if s.n_within == most)
    assert best is not None
    notes.append(f"no {what} keeps its overall P99 within {MAX_OVERALL:g}x the best prediction-free arm's in every pair: shown, "
                 f"{best.arm}, the best of those within it in the most pairs ({most} of {best.pairs})")
    return Pick(role, best, strict=False)


def default_arm(arms: Iterable[str]) -> tuple[str, bool]:
    """The default arm (the recommended policy, :data:`RECOMMENDED`: late-binding FCFS, no prediction, as the
    yardstick labels it) and whether the rows ran it."""
    mine = f"{RECOMMENDED['name']}/-"
    return mine, mine in set(arms)


def choose(stats: dict[str, ArmStats]) -> tuple[list[Pick], list[str]]:
    """The five arms of one group (fewer where none qualifies, with a note saying which and why)."""
    picks, notes = [], []
    for role, arm in (("best prediction-free", REFERENCE), ("FCFS + RR", BASELINE)):
        if arm in stats:
            picks.append(Pick(role, stats[arm]))
    default, own = default_arm(stats)
    if default in stats:
        picks.append(Pick("default", stats[default]))
    else:
        notes.append(f"the default {default} was not run here")
    real = _constrained("best real predictor", [s for s in stats.values() if s.predictor in REAL_PREDICTORS
                                                and s.arm != default], "real-predictor arm", notes)
    true = _constrained("true-length ceiling", [s for s in stats.values() if s.predictor == "true"], "/true arm",
                        notes)
    picks += [p for p in (real, true) if p is not None]
    order = {r: i for i, r in enumerate(ROLES)}
    return sorted(picks, key=lambda p: order[p.role]), notes


def summarize(rows: Sequence[_Row]) -> list[Group]:
    """One :class:`Group` per (regime, cluster, batch): steady first, then the episodes."""
    by: dict[tuple[str, str, int], list[_Row]] = defaultdict(list)
    for row in rows:
        by[row.cell.regime, row.cell.cluster, row.cell.batch].append(row)
    order = {"steady": 0, "episode": 1}
    out = []
    for (regime, cluster, batch), rs in sorted(by.items(), key=lambda kv: (order.get(kv[0][0], 2), kv[0])):
        refs: dict[str, int] = {}
        picks, notes = choose(arm_stats(rs, refs))
        free = sorted({a for r in rs for a in r.arms if a.endswith("/-")})
        if not any("@" in a or " late/" in a for a in free):
            notes.append(f"only {', '.join(free)} ran without a prediction here: the reference is the best of "
                         "those, not of the load-aware dispatchers (add them with bench_yardstick --augment)")
        places = tuple(dict.fromkeys(f"{r.cell.where} {r.cell.arrival}" for r in
                                     sorted(rs, key=lambda r: (r.cell.where, r.cell.arrival))))
        out.append(Group(regime, cluster, batch, places, len({r.cell.seed for r in rs}), len(rs), tuple(picks),
                         tuple(notes), tuple(sorted(refs.items(), key=lambda kv: (-kv[1], kv[0])))))
    return out
