"""`lenpred report`: the page's sections, its figures against the inputs, self-containment, and the
one-line refusals that write nothing."""

from __future__ import annotations

import html
import io
import json
import shutil
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from lenpred.bench.evaluate import BenchResult
from lenpred.cli import main
from lenpred.data.lengths import sample_lengths
from lenpred.data.rundir import RunDir
from lenpred.data.split import load_split
from lenpred.report.page import ReportInputs, write_report
from lenpred.report.page.sections import TITLES
from report.report_inputs import ALPACA, CONSTANT, Inputs


class _Page(HTMLParser):
    """Section ids and headings, images, tables (title -> rows of cell text), and every URL referenced."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.headings: list[str] = []
        self.images: list[str] = []
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self.tables: dict[str, list[list[str]]] = {}
        self._h: str | None = None
        self._text = ""
        self._last_h3 = ""
        self._row: list[str] | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        if tag == "section":
            self.sections.append(str(a.get("id")))
        if tag in ("h2", "h3"):
            self._h, self._text = tag, ""
        if tag == "img":
            self.images.append(str(a.get("src")))
        for k in ("src", "href"):
            if a.get(k) and tag != "img":
                self.urls.append(str(a[k]))
        if tag == "table":
            self.tables[self._last_h3] = []
        if tag == "tr":
            self._row = []
        if tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == self._h:
            if tag == "h2":
                self.headings.append(self._text)
            else:
                self._last_h3 = self._text
            self._h = None
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        if tag == "tr" and self._row is not None:
            self.tables[self._last_h3].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._h:
            self._text += data
        if self._cell is not None:
            self._cell += data


def parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def _row(page: _Page, title_start: str, first: str) -> list[str]:
    title = next(t for t in page.tables if t.startswith(title_start))
    return next(r for r in page.tables[title] if r[0] == first)


# ------------------------------------------------------------------------------------------ the page
def test_every_section_in_order_and_self_contained(full_page: Path) -> None:
    page = parse(full_page)
    assert page.sections == list(TITLES)
    assert page.headings == list(TITLES.values())
    # 4 bound plots, 3 bench plots (coverage: prompt-mean has an interval; pred vs true: both tables are
    # readable), transfer, 3 OUTLETS, the yardstick's one group, sim
    assert len(page.images) == 4 + 3 + 1 + 3 + 1 + 1
    assert all(src.startswith("data:image/png;base64,") for src in page.images)
    assert not page.tags & {"script", "link", "iframe", "object", "embed"}
    assert all(u.startswith("#") for u in page.urls), page.urls  # only links to its own sections
    text = full_page.read_text()
    assert "http://" not in text and "https://" not in text and "@import" not in text


def test_bench_figures_are_the_known_answers(full_page: Path, inputs: Inputs) -> None:
    """The constant predictor's MAE, computed here from the samples, is the figure on the page."""
    rd = RunDir.open(inputs.run)
    test_ids = set(load_split(rd, require_complete=False).test)
    s = sample_lengths(rd, with_prompts=False)
    t = s[s["prompt_id"].isin(test_ids)]
    per_prompt = t.assign(err=(t["n_tokens"] - CONSTANT).abs()).groupby("prompt_id")["err"].mean()
    page = parse(full_page)
    row = _row(page, "Bench on smollm2-sharegpt", "constant")
    assert row[1] == "all" and row[2] == str(len(t))
    assert row[3] == f"{per_prompt.mean():.1f}"
    res = BenchResult.from_dict(json.loads((inputs.bench / "bench.json").read_text()))
    bound = _row(page, "Bench on smollm2-sharegpt", "oracle bound")
    assert bound[3] == f"{res.bound.oracle_mae:.1f}"
    assert f"{res.row('constant').mae_over_bound:.3f}" in row
    # every subset is in the page's table (the console's is narrower)
    title = next(x for x in page.tables if x.startswith("Bench on smollm2-sharegpt"))
    assert {r[1] for r in page.tables[title][1:]} == {"all", "eos", "truncated"}
    assert len(page.tables[title][0]) == 13


def test_transfer_sets_each_run_against_its_own_bound(full_page: Path, inputs: Inputs) -> None:
    home = BenchResult.from_dict(json.loads((inputs.bench / "bench.json").read_text()))
    other = BenchResult.from_dict(json.loads((inputs.transfer / "bench.json").read_text()))
    page = parse(full_page)
    assert _row(page, "MAE and MAE / bound", "oracle bound")[1:] == [
        f"{home.bound.oracle_mae:.1f}", "1.000", f"{other.bound.oracle_mae:.1f}", "1.000"]
    r = _row(page, "MAE and MAE / bound", "prompt-mean")
    assert r[2] == f"{home.row('prompt-mean').mae_over_bound:.3f}"
    assert r[4] == f"{other.row('prompt-mean').mae_over_bound:.3f}"


def test_bound_verdicts_and_commands(full_page: Path, inputs: Inputs) -> None:
    text = full_page.read_text()
    bound = json.loads((inputs.bound / "bound.json").read_text())
    for claim, verdict in bound["verdicts"].items():
        assert claim.replace("_", " ") in text
        assert verdict.split(": ")[0] in text
    assert f"lenpred bound {inputs.run} --out {inputs.bound}" in text
    assert f"lenpred bench --run {inputs.run} --predictions constant=" in text
    traj = json.loads((inputs.outlets / "outlets_bench.json").read_text())["protocol"]["trajectory"]
    assert f"lenpred outlets bench --traj {traj}" in text  # the trajectory the committed bench read
    assert "python -m benchmarks.policies --tiny" in text  # the command the policies file records


def test_yardstick_section_known_answers(full_page: Path, inputs: Inputs) -> None:
    """The hand-made yardstick group (report_inputs.YARDSTICK_ARMS): five arms, the known best ones."""
    page = parse(full_page)
    title = next(t for t in page.tables if t.startswith("Yardstick, steady loads, 1+2 cluster, batch 16"))
    rows = page.tables[title]
    assert rows[0] == ["arm", "policy/predictor", "short P99 / best free", "overall P99 / best free",
                       "short P50 / best free", "SLO attainment %", "goal (<= 0.8x short) / never worse (<= 1.02x)",
                       "pairs (seeds)"]
    assert [r[:2] for r in rows[1:]] == [
        ["best prediction-free", "best prediction-free"], ["FCFS + RR", "fcfs+rr/-"], ["default", "fcfs late/-"],
        ["best real predictor", "sjf aging100/mlp"], ["true-length ceiling", "boost2 boost_s10 short_threshold224/true"]]
    assert rows[4][2:] == ["0.60 (0.60-0.60)", "1.03 (1.03-1.03)", "0.60 (0.60-0.60)", "90.0 (90.0-90.0)", "2 / 0",
                           "2 (2)"]
    assert rows[5][2:4] == ["0.30 (0.30-0.30)", "1.02 (1.02-1.02)"]
    text = html.unescape(full_page.read_text())
    assert "The best prediction-free arm was fcfs+rr/- in 2" in text
    assert "docs/yardstick/yardstick.md" in text and "docs/policies/README.md" in text
    assert "the recommended policy and the router's default, fcfs late/-" in text
    assert str(inputs.yardstick) in text and "python -m benchmarks.policies --tiny" in text
    assert "Yardstick, steady loads, 1+2 cluster, batch 16: short-request against overall P99" in text  # the figure


def test_the_committed_yardstick_by_default(tmp_path: Path, inputs: Inputs) -> None:
    """Without --yardstick the page reads docs/yardstick/*-cells.jsonl: a figure and a table per group."""
    from lenpred.report.yardstick import default_paths

    assert [p.name for p in default_paths()] == ["steady-cells.jsonl", "episodes-cells.jsonl"]
    res = write_report(ReportInputs(inputs.run), tmp_path / "r.html")
    assert res.sections == ("run", "value")
    page = parse(res.path)
    titles = [t for t in page.tables if t.startswith("Yardstick, ")]
    # steady 1+2 at batch 16 and 256, 4+8 at 16; episodes 1+2 and 4+8, each at 16 and 256
    assert len(page.images) == len(titles) == 7
    for t in titles:
        assert [r[0] for r in page.tables[t][1:4]] == ["best prediction-free", "FCFS + RR", "default"]


def test_no_yardstick_results_say_what_to_run(tmp_path: Path, inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    import lenpred.report.yardstick as ys

    monkeypatch.setattr(ys, "default_paths", lambda: [])
    res = write_report(ReportInputs(inputs.run), tmp_path / "r.html")
    assert res.sections == ("run", "value")
    text = res.path.read_text()
    assert "No scheduling yardstick results were found" in text and "python -m benchmarks.bench_yardstick" in text
    assert not parse(res.path).images


def test_only_the_run_gives_one_section_and_names_the_rest(tmp_path: Path, inputs: Inputs) -> None:
    res = write_report(ReportInputs(inputs.run, yardstick=()), tmp_path / "r.html")
    assert res.sections == ("run",)
    page = parse(res.path)
    assert page.sections == ["run"]
    text = res.path.read_text()
    assert "Not in this report" in text and "--bound" in text and "--outlets" in text
    assert res.size == len(res.path.read_bytes())


# ------------------------------------------------------------------------------------------ refusals
def _bad(tmp_path: Path, *argv: object, capsys: pytest.CaptureFixture[str]) -> str:
    out = tmp_path / "r.html"
    rc = main(["report", *[str(a) for a in argv], "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert not out.exists(), "nothing is written on a refusal"
    assert len(err.splitlines()) == 1 and err.startswith("lenpred report: error: ")
    return err


def test_refuses_a_result_of_another_kind(tmp_path: Path, inputs: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(tmp_path, "--run", inputs.run, "--bound", inputs.bench, capsys=capsys)
    assert "is a bench artifact, expected bound" in err


def _copy(src: Path, dst: Path, meta: dict[str, Any] | None = None, edit: Callable[[Path], None] | None = None) -> Path:
    """A copy of an artifact with ``meta`` merged into its meta.json and ``edit`` applied to the folder
    (the sha256 records of the files it changed are renewed, so only the intended change is seen)."""
    from lenpred.io.fileio import file_sha256

    shutil.copytree(src, dst)
    if edit is not None:
        edit(dst)
    m = json.loads((dst / "meta.json").read_text())
    m["files"] = {name: file_sha256(dst / name) for name in m["files"]}
    (dst / "meta.json").write_text(json.dumps({**m, **(meta or {})}))
    return dst


def test_refuses_another_schema_version(tmp_path: Path, inputs: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _copy(inputs.bench, tmp_path / "bench", {"schema_version": 2})
    err = _bad(tmp_path, "--run", inputs.run, "--bench", bench, capsys=capsys)
    assert "schema version 2" in err


def test_refuses_an_outlets_bench_of_another_card(tmp_path: Path, inputs: Inputs,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    other = _copy(inputs.outlets, tmp_path / "outlets", {"card": {"card_hash": "0123456789abcdef"}})
    err = _bad(tmp_path, "--run", inputs.run, "--outlets", other, capsys=capsys)
    assert "another card" in err and "0123456789abcdef" in err


def test_refuses_a_bound_of_another_run(tmp_path: Path, inputs: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(tmp_path, "--run", ALPACA, "--bound", inputs.bound, capsys=capsys)
    assert "another card" in err


def test_transfer_needs_the_runs_own_bench(tmp_path: Path, inputs: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(tmp_path, "--run", inputs.run, "--bench", inputs.transfer, capsys=capsys)
    assert "pass the bench of this run too" in err
    err = _bad(tmp_path, "--run", inputs.run, "--bench", inputs.bench, inputs.bench, capsys=capsys)
    assert "two --bench reports" in err


def test_refuses_a_transfer_under_another_sampling_card(tmp_path: Path, inputs: Inputs,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    def hotter(folder: Path) -> None:
        d = json.loads((folder / "bench.json").read_text())
        d["protocol"]["sampling"]["temperature"] = 0.7
        (folder / "bench.json").write_text(json.dumps(d))

    bench = _copy(inputs.transfer, tmp_path / "bench", edit=hotter)
    err = _bad(tmp_path, "--run", inputs.run, "--bench", inputs.bench, bench, capsys=capsys)
    assert "another sampling card (temperature: 0.7 != 1.0)" in err


def test_refuses_bad_policy_rows_and_missing_paths(tmp_path: Path, inputs: Inputs,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps([{"policy": "fcfs", "load": 1.0}]))
    assert "row 0 lacks short_p99_s" in _bad(tmp_path, "--run", inputs.run, "--policies", bad, capsys=capsys)
    bad.write_text(json.dumps({"rows": [{"policy": "fcfs", "load": 1.0, "short_p99_s": "slow"}]}))
    assert "row 0 has short_p99_s 'slow', not a number" in _bad(tmp_path, "--run", inputs.run, "--policies", bad,
                                                                 capsys=capsys)
    assert "does not exist" in _bad(tmp_path, "--run", inputs.run, "--sim", tmp_path / "nope", capsys=capsys)
    assert "not a lenpred run directory" in _bad(tmp_path, "--run", tmp_path / "nope", capsys=capsys)


def test_refuses_bad_yardstick_rows_and_missing_paths(tmp_path: Path, inputs: Inputs,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    err = _bad(tmp_path, "--run", inputs.run, "--yardstick", tmp_path / "nope.jsonl", capsys=capsys)
    assert "nope.jsonl: no yardstick cells file there" in err and "python -m benchmarks.bench_yardstick" in err
    (tmp_path / "ys").mkdir()
    bad = tmp_path / "ys" / "cells.jsonl"  # a folder's *cells.jsonl
    bad.write_text(inputs.yardstick.read_text().splitlines()[0] + "\n{not json\n")
    assert f"{bad} line 2 is not JSON" in _bad(tmp_path, "--run", inputs.run, "--yardstick", bad.parent,
                                               capsys=capsys)


def test_refuses_to_overwrite_a_file_that_is_not_a_report(tmp_path: Path, inputs: Inputs,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my own notes</html>")
    rc = main(["report", "--run", str(inputs.run), "--out", str(mine)])
    assert rc == 1 and "is not a lenpred report" in capsys.readouterr().err
    assert mine.read_text() == "<html>my own notes</html>"
    rc = main(["report", "--run", str(inputs.run), "--out", str(tmp_path / "r.txt")])
    assert rc == 1 and "not an .html file" in capsys.readouterr().err
    rc = main(["report", "--run", str(inputs.run), "--bench", str(inputs.bench), "--out", str(inputs.bench / "r.html")])
    assert rc == 1 and "is inside the command's own input --bench" in capsys.readouterr().err
    rc = main(["report", "--run", str(inputs.run), "--out", str(inputs.bench / "r.html")])
    assert rc == 1 and "is inside a lenpred bench" in capsys.readouterr().err and not (inputs.bench / "r.html").exists()
    (tmp_path / "d.html").mkdir()
    rc = main(["report", "--run", str(inputs.run), "--out", str(tmp_path / "d.html")])
    assert rc == 1 and "is a directory" in capsys.readouterr().err


def test_replaces_its_own_report(tmp_path: Path, inputs: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert main(["report", "--run", str(inputs.run), "--out", str(out)]) == 0
    assert main(["report", "--run", str(inputs.run), "--bound", str(inputs.bound), "--yardstick", "--out", str(out)]) == 0
    assert parse(out).sections == ["run", "bound"]
    assert f"report: {out}" in capsys.readouterr().out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary file left behind"


def test_sim_of_another_run_is_refused(tmp_path: Path, inputs: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    def elsewhere(folder: Path) -> None:
        d = json.loads((folder / "results.json").read_text())
        d["config"]["workload"]["lengths"]["path"] = str(ALPACA)
        (folder / "results.json").write_text(json.dumps(d))

    sim = _copy(inputs.sim, tmp_path / "sim", edit=elsewhere)
    err = _bad(tmp_path, "--run", inputs.run, "--sim", sim, capsys=capsys)
    assert "replays run" in err and str(ALPACA) in err
    assert "is a bench artifact, expected sim" in _bad(tmp_path, "--run", inputs.run, "--sim", inputs.bench,
                                                       capsys=capsys)

    def broken(folder: Path) -> None:
        d = json.loads((folder / "results.json").read_text())
        d["runs"] = [{"policy": "fcfs+rr"}]
        (folder / "results.json").write_text(json.dumps(d))

    sim = _copy(inputs.sim, tmp_path / "sim-broken", edit=broken)
    assert "is not a lenpred simulate result (KeyError" in _bad(tmp_path, "--run", inputs.run, "--sim", sim,
                                                                capsys=capsys)
    bare = tmp_path / "sim-bare"  # results.json and config.json without meta.json: not a sim artifact
    shutil.copytree(inputs.sim, bare)
    (bare / "meta.json").unlink()
    assert "sim-bare" in _bad(tmp_path, "--run", inputs.run, "--sim", bare, capsys=capsys)


def test_bench_console_fits_100_columns(inputs: Inputs) -> None:
    """Part 4 of issue 23: the console table fits a 100-column terminal; a wide one keeps every column."""
    from rich.console import Console

    from lenpred.report.bench import COLUMNS, render_console

    res = BenchResult.from_dict(json.loads((inputs.bench / "bench.json").read_text()))
    narrow = Console(width=100, record=True, file=io.StringIO())
    render_console(res, console=narrow)
    text = narrow.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert f"{res.bound.oracle_mae:.1f}" in text and "MAE / bound" in text and "left out to fit 100" in text
    wide = Console(width=200, record=True, file=io.StringIO())
    render_console(res, console=wide)
    header = next(line for line in wide.export_text().splitlines() if "predictor" in line)
    assert all(c in header for c in COLUMNS)
    assert "left out" not in wide.export_text()


def test_outlets_live_heads_the_section_with_the_other_benchs_live_series(tmp_path: Path, inputs: Inputs,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """--outlets-live: the committed full-size live bench's series heads the OUTLETS section (its figures, its
    command), the fraction tables stay those of --outlets; a bench without a live series is refused."""
    live_dir = inputs.outlets.parent / "outlets_real_live_full"
    live = json.loads((live_dir / "outlets_live.json").read_text())
    out = tmp_path / "r.html"
    assert main(["report", "--run", str(inputs.run), "--outlets", str(inputs.outlets), "--outlets-live", str(live_dir),
                 "--yardstick", "--out", str(out)]) == 0
    page = parse(out)
    best = min(live["methods"], key=lambda n: live["methods"][n]["ratio_vs_carried_mlp"])
    r = _row(page, "Live series: remaining-length MAE per row", best)
    assert r[3].startswith(f"{live['methods'][best]['ratio_vs_carried_mlp']:.3f} (")
    assert f"{live['n_samples']} samples, {live['rows']} rows" in out.read_text()
    assert f"--out {live_dir}" in out.read_text()  # the live bench's own command
    (tmp_path / "bad").mkdir()
    err = _bad(tmp_path / "bad", "--run", inputs.run, "--outlets-live", inputs.outlets, capsys=capsys)
    assert "holds no live series" in err and "--rows live" in err
