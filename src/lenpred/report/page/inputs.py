"""The report's inputs, loaded through each verb's own result types and checked against the run.

Every input is opened and checked before anything is drawn or written: a missing path, a directory
of another kind or schema version, or a result made under another run card raises the usual
one-line :class:`~lenpred.errors.LenpredError`, so ``lenpred report`` writes all or nothing.

* ``--bound``    a ``lenpred bound`` artifact (kind ``bound``) of this run;
* ``--bench``    ``lenpred bench`` artifacts (kind ``bench``): one of this run, and any number of
  other runs collected under the same model and sampling card (transfer between prompt sets);
* ``--outlets``  a ``lenpred outlets bench`` artifact (kind ``outlets-bench``) of this run;
* ``--outlets-live`` another such artifact whose live series (``outlets_live.json``) heads the OUTLETS
  section instead of ``--outlets``' own (a bench on a trajectory of live rows only, beside the
  fraction-row bench);
* ``--sim``      ``lenpred simulate`` artifacts (kind ``sim``: ``results.json`` + ``config.json``);
* ``--policies`` a JSON list of rows ``{policy, predictor, load, short_p99_s, ...}`` (named as the full table);
* ``--yardstick`` the scheduling yardstick's cells files (``*cells.jsonl``, or folders holding them);
  without the flag, the committed ``docs/yardstick/*-cells.jsonl`` (none found: the section says what
  to run); the flag with no path leaves the yardstick out.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lenpred.bench.evaluate import BenchResult
from lenpred.data.rundir import RunDir
from lenpred.errors import CardMismatchError, DataError
from lenpred.io.artifacts import Artifact, load_artifact
from lenpred.outlets.evaluate import OutletsBench
from lenpred.sim.sweep import SweepResult
from lenpred.stats.artifact import BOUND_JSON
from lenpred.stats.artifact import KIND as BOUND_KIND
from lenpred.stats.artifact import SCHEMA_VERSION as BOUND_SCHEMA
from lenpred.stats.results import BoundSummary

if TYPE_CHECKING:
    from lenpred.report.yardstick import Group

__all__ = ["ReportInputs", "Loaded", "LoadedBench", "LoadedYardstick", "load_inputs", "command_line"]

BENCH_SCHEMA = 1
OUTLETS_SCHEMA = 1
SIM_KIND, SIM_SCHEMA = "sim", 1
POLICY_KEYS = ("policy", "load", "short_p99_s")


@dataclass(frozen=True)
class ReportInputs:
    """Paths as the user gave them; only ``run`` is required."""

    run: Path
    bound: Path | None = None
    bench: tuple[Path, ...] = ()
    outlets: Path | None = None
    outlets_live: Path | None = None
    sim: tuple[Path, ...] = ()
    policies: Path | None = None
    yardstick: tuple[Path, ...] | None = None  # None: the committed docs/yardstick cells; (): none


@dataclass(frozen=True)
class LoadedBench:
    art: Artifact
    result: BenchResult

    @property
    def run_name(self) -> str:
        return Path(self.result.protocol.run).name


@dataclass(frozen=True)
class LoadedSim:
    path: Path
    result: SweepResult  # rebuilt from results.json: summaries only, no per-request arrays
    command: str


@dataclass
class Loaded:
    inputs: ReportInputs
    run: RunDir
    bound: tuple[Artifact, BoundSummary] | None = None
    bench: LoadedBench | None = None  # the bench of this run
    transfer: list[LoadedBench] = field(default_factory=list)  # benches of other runs, same model+sampling
    outlets: tuple[Artifact, OutletsBench] | None = None
    outlets_live: Artifact | None = None  # the bench whose live series heads the OUTLETS section
    sims: list[LoadedSim] = field(default_factory=list)
    policies: tuple[list[dict[str, Any]], str | None] | None = None  # rows, the command that made them
    yardstick: LoadedYardstick | None = None  # None: left out (--yardstick with no path)


@dataclass(frozen=True)
class LoadedYardstick:
    groups: list[Group]  # empty: no results found at the default path
    paths: list[str]


def command_line(argv: Sequence[Any]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv if a is not None and a != "")


def _flag_list(flag: str, values: Any) -> list[str]:
    vals = [str(v) for v in (values or [])]
    return [flag, *vals] if vals else []


def recorded_command(meta: Mapping[str, Any], rebuilt: Sequence[Any]) -> str:
    """The command recorded in an artifact's meta.json, else the one its recorded config implies."""
    cmd = meta.get("command")
    if isinstance(cmd, str) and cmd:
        return cmd
    if isinstance(cmd, list) and cmd:
        return command_line(cmd)
    return command_line(rebuilt)


def _load_bound(path: Path, rd: RunDir) -> tuple[Artifact, BoundSummary]:
    art = load_artifact(path, kind=BOUND_KIND, schema_versions=(BOUND_SCHEMA,), card=rd.card, what="bound result")
    return art, BoundSummary.from_json_dict(art.read_json(BOUND_JSON))


def _load_bench(path: Path) -> LoadedBench:
    art = load_artifact(path, kind="bench", schema_versions=(BENCH_SCHEMA,), what="bench report")
    try:
        return LoadedBench(art, BenchResult.from_dict(art.read_json("bench.json")))
    except (KeyError, TypeError, ValueError) as e:  # a hand-edited file: the artifact's sha256 was renewed
        raise DataError(f"{path}/bench.json is not a bench result ({type(e).__name__}: {e})",
                        "re-create it with `lenpred bench`") from None


def _check_transfer(b: LoadedBench, rd: RunDir) -> None:
    """A bench of another run is a transfer only under the same model and sampling card."""
    p = b.result.protocol
    mine = rd.card.get("model", {}).get("fingerprint")
    if p.model_fingerprint != mine:
        raise CardMismatchError(
            f"bench {b.art.path} is of run {p.run} under another model ({p.model_fingerprint} != {mine})",
            "transfer compares prompt sets under one model and sampling card: pass benches of such runs",
        )
    for k, v in rd.card.get("sampling", {}).items():
        if p.sampling.get(k) != v:
            raise CardMismatchError(
                f"bench {b.art.path} is of run {p.run} under another sampling card ({k}: {p.sampling.get(k)!r} "
                f"!= {v!r})",
                "transfer compares prompt sets under one model and sampling card: pass benches of such runs",
            )


def _split_benches(paths: Sequence[Path], rd: RunDir) -> tuple[LoadedBench | None, list[LoadedBench]]:
    home: LoadedBench | None = None
    other: list[LoadedBench] = []
    for path in paths:
        b = _load_bench(path)
        if b.art.meta.get("card_hash") == rd.card_hash:
            if home is not None:
                raise DataError(f"two --bench reports of run {rd.path}: {home.art.path} and {path}",
                                "pass one bench of this run (a bench of another run is a transfer)")
            home = b
        else:
            _check_transfer(b, rd)
            other.append(b)
    if other and home is None:
        raise DataError(f"--bench {other[0].art.path} is of another run ({other[0].result.protocol.run}) and none "
                        f"is of {rd.path}", "pass the bench of this run too: transfer compares the two")
    return home, other


def _load_outlets(path: Path, rd: RunDir) -> tuple[Artifact, OutletsBench]:
    art = load_artifact(path, kind="outlets-bench", schema_versions=(OUTLETS_SCHEMA,), card=rd.card,
                        what="OUTLETS bench")
    return art, OutletsBench.from_dict(art.read_json("outlets_bench.json"), where=f"{path}/outlets_bench.json")


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise DataError(f"{what} {path} not found", "check the path")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not valid JSON ({e})", "re-create it") from None


def _load_sim(path: Path, rd: RunDir) -> LoadedSim:
    """A ``lenpred simulate`` output folder, rebuilt as a :class:`SweepResult` of its summaries."""
    from lenpred.sim.config import SimConfig
    from lenpred.sim.sweep import Run

    folder = path.parent if path.name == "results.json" else path
    if not folder.is_dir():
        raise DataError(f"simulator output {folder} does not exist", "pass a folder written by `lenpred simulate`")
    meta = load_artifact(folder, kind=SIM_KIND, schema_versions=(SIM_SCHEMA,), what="simulator output").meta
    d = _read_json(folder / "results.json", "simulator results")
    need = ("config", "runs", "baseline", "short_threshold_tokens")
    if not isinstance(d, dict) or any(k not in d for k in need):
        raise DataError(f"{folder}/results.json is not a lenpred simulate result (needs {', '.join(need)})",
                        "pass a folder written by `lenpred simulate`")
    cfg = SimConfig.from_dict(d["config"], where=f"{folder}/results.json config")
    lengths = cfg.workload.lengths
    if lengths.source == "rundir" and lengths.path and (Path(lengths.path) / "card.json").is_file():
        other = RunDir.open(lengths.path)
        if other.card_hash != rd.card_hash:
            raise CardMismatchError(
                f"simulator output {folder} replays run {lengths.path} (card {other.card_hash}), not {rd.path} "
                f"(card {rd.card_hash})", "pass a simulation of this run's samples, or drop --sim")
    empty = np.empty(0)
    try:
        runs = [Run(r["policy"], r["load"], r.get("rate_rps"), r["summary"], empty, empty.astype(bool))
                for r in d["runs"]]
        res = SweepResult(cfg, d.get("capacity_rps"), float(d["short_threshold_tokens"]), str(d["baseline"]), runs,
                          float(d.get("wall_s", 0.0)))
        res.table()  # every arm at every load, with its short-request P99
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"{folder}/results.json is not a lenpred simulate result ({type(e).__name__}: {e})",
                        "pass a folder written by `lenpred simulate`") from None
    cmd = recorded_command(meta, ["lenpred", "simulate", "--config", folder / "config.json", "--out", folder])
    return LoadedSim(folder, res, cmd)


def _load_policies(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    d = _read_json(path, "policies table")
    rows, cmd = (d.get("rows"), d.get("command")) if isinstance(d, dict) else (d, None)
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path} holds no rows", "pass a JSON list of {policy, predictor, load, short_p99_s, ...}")
    for i, r in enumerate(rows):
        missing = [k for k in POLICY_KEYS if not isinstance(r, dict) or k not in r]
        if missing:
            raise DataError(f"{path}: row {i} lacks {', '.join(missing)}",
                            "each row needs policy, load and short_p99_s (predictor optional)")
        bad = [k for k, optional in (("load", False), ("short_p99_s", True))
               if not (isinstance(r[k], int | float) or (optional and r[k] is None))]
        if bad:
            raise DataError(f"{path}: row {i} has {bad[0]} {r[bad[0]]!r}, not a number",
                            "load and short_p99_s are numbers (short_p99_s may be null)")
    return rows, (str(cmd) if cmd else None)


def _load_yardstick(paths: tuple[Path, ...] | None) -> LoadedYardstick | None:
    from lenpred.report.yardstick import MAKE_COMMAND, default_paths, load_cells, summarize

    if paths == ():
        return None
    found = default_paths() if paths is None else list(paths)
    rows = load_cells(found) if found else []
    if paths is not None and not rows:  # passed on purpose: a page without its scheduling section is a surprise
        raise DataError(f"--yardstick {' '.join(str(p) for p in found)} holds no yardstick cell row (an empty file, "
                        "or goodput rows only): the page would lack its scheduling section",
                        f"pass the cells of a yardstick run (make them with {MAKE_COMMAND}), or pass --yardstick "
                        "with no path to leave the section out")
    return LoadedYardstick(summarize(rows), [str(p) for p in found])


def load_inputs(inputs: ReportInputs) -> Loaded:
    """Open and check every input; raises a :class:`LenpredError` naming the first bad one."""
    rd = RunDir.open(inputs.run)
    out = Loaded(inputs, rd)
    if inputs.bound is not None:
        out.bound = _load_bound(inputs.bound, rd)
    out.bench, out.transfer = _split_benches(inputs.bench, rd)
    if inputs.outlets is not None:
        out.outlets = _load_outlets(inputs.outlets, rd)
    if inputs.outlets_live is not None:
        art, res = _load_outlets(inputs.outlets_live, rd)
        if "outlets_live.json" not in (art.meta.get("files") or {}):
            raise DataError(f"--outlets-live {inputs.outlets_live} holds no live series (outlets_live.json)",
                            "rerun lenpred outlets bench on a trajectory with live rows (lenpred outlets features "
                            "--rows live), or drop --outlets-live")
        out.outlets_live = art
        if out.outlets is None:
            out.outlets = (art, res)
    out.sims = [_load_sim(p, rd) for p in inputs.sim]
    if inputs.policies is not None:
        out.policies = _load_policies(inputs.policies)
    out.yardstick = _load_yardstick(inputs.yardstick)
    return out


def bench_command(art: Artifact) -> str:
    c = art.config
    return recorded_command(art.meta, [
        "lenpred", "bench", "--run", c.get("run"), *_flag_list("--heads", c.get("heads")),
        *_flag_list("--predictions", c.get("predictions")), "--features" if c.get("features") else None,
        c.get("features"), "--out", art.path,
    ])


def outlets_command(art: Artifact) -> str:
    c = art.config
    return recorded_command(art.meta, [
        "lenpred", "outlets", "bench", "--traj", c.get("traj"), "--run", c.get("run"),
        *_flag_list("--heads", c.get("heads")), *_flag_list("--prefill-predictions", c.get("prefill_predictions")),
        "--out", art.path,
    ])


def bound_command(art: Artifact) -> str:
    return recorded_command(art.meta, ["lenpred", "bound", art.meta.get("run") or art.config.get("source"),
                                       "--out", art.path])
