"""`lenpred bound RUN --out DIR` end to end on a small synthetic run: the artifact and what it holds."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lenpred import __version__
from lenpred.cli import main
from lenpred.data.rundir import RunDir
from lenpred.stats import load_bound, load_per_prompt
from lenpred.stats import synthetic as sim
from lenpred.stats.results import AffineFit, BoundSummary

PLOTS = ("hist_grid.png", "sd_vs_mu.png", "hazard.png", "mae_normal.png")
FAST = ["--n-boot", "50", "--n-boot-robust", "10", "--n-normal-reference", "300", "--n-imputations", "4"]


@pytest.fixture(scope="module")
def cli_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    base = tmp_path_factory.mktemp("cli")
    sim.write_synthetic_run(base / "run", sim.ramping_hazard(60, seed=9),
                            sim.Sampling(k=8, max_new_tokens=420, seed=9))
    argv = ["bound", str(base / "run"), "--out", str(base / "out"), "--n-boot", "200", "--grid", "4",
            "--segment-unit", "sentence", "--n-normal-reference", "500", "--n-imputations", "5"]
    return base / "run", base / "out", " ".join(argv)


@pytest.fixture(scope="module")
def console(cli_out: tuple[Path, Path, str]) -> str:
    import contextlib

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(cli_out[2].split(" ")) == 0
    return " ".join(buf.getvalue().split())  # rich wraps long lines at the console width


def test_console_report(console: str, cli_out: tuple[Path, Path, str]) -> None:
    s = load_bound(cli_out[1])
    head = s.headline_bound
    for needle in (
        f"{head.oracle_mae:.1f}",  # the headline figure, as in bound.json
        f"{head.relative_mae:.3f}",
        "censoring-aware (headline)",
        "EOS-only",
        "capped (served)",
        "sentence-count CV (mean over prompts)",
        "Shapiro-Wilk",
        f"normal law: {s.verdicts['normal_law']}",
        f"hazard ramp: {s.verdicts['hazard_ramp']}",
        "bound.json",
    ):
        assert needle in console, needle


def test_artifact_holds_every_file(cli_out: tuple[Path, Path, str], console: str) -> None:
    run, out, _ = cli_out
    meta = json.loads((out / "meta.json").read_text())
    assert meta["kind"] == "bound" and meta["schema_version"] == 1 and meta["source"] == "run"
    assert meta["card_hash"] == RunDir.open(run).card_hash and meta["card_scope"] == "run"
    assert meta["config"]["n_boot"] == 200 and meta["config"]["segment_unit"] == "sentence"
    assert set(meta["files"]) == {"bound.json", "summary.md", "per_prompt.csv", *PLOTS}
    assert {p.name for p in out.iterdir()} == {"meta.json", *meta["files"]}  # nothing else, no temp files


def test_bound_json_round_trip(cli_out: tuple[Path, Path, str], console: str) -> None:
    run, out, _ = cli_out
    raw = (out / "bound.json").read_text()
    assert "NaN" not in raw and "Infinity" not in raw  # strict JSON
    b = json.loads(raw)
    s = load_bound(out, card=RunDir.open(run).card)  # typed, and checked against the run's card
    assert isinstance(s, BoundSummary) and s.to_json_dict() == b  # reading and writing lose nothing
    assert s.card_hash == RunDir.open(run).card_hash and s.lenpred_version == __version__
    assert s.config.n_boot == 200 and s.segments.unit == "sentence"
    v = s.headline_bound
    assert v.oracle_mae_ci[0] < v.oracle_mae < v.oracle_mae_ci[1]
    assert 0 < v.relative_mae < 1
    assert isinstance(s.affine, AffineFit) and s.affine.alpha_ci[0] < s.affine.alpha < s.affine.alpha_ci[1]
    assert set(s.verdicts) == {"normal_law", "affine_law", "alpha_is_segment_cv", "hazard_ramp"}
    assert len(s.hazard.pooled.table.hazard) > 5


def test_per_prompt_csv_matches_the_analysis(cli_out: tuple[Path, Path, str], console: str) -> None:
    run, out, _ = cli_out
    pp = load_per_prompt(out)
    s = load_bound(out)
    assert set(pp["variant"]) == {"censored", "eos", "capped"}
    for name in ("censored", "eos", "capped"):
        rows = pp[pp["variant"] == name]
        v = s.variants[name]
        assert len(rows) == v.n_prompts and rows["k"].sum() == v.n_samples
        # per_prompt.csv has 6 significant digits: the bound is the mean of its per-prompt column
        assert rows["mae_oracle"].mean() == pytest.approx(v.oracle_mae, rel=1e-5)
    assert "seg_cv" in pp  # the segment columns of the theory variant ride along


def test_summary_md_embeds_figures_and_plots(cli_out: tuple[Path, Path, str], console: str) -> None:
    out = cli_out[1]
    s = load_bound(out)
    md = (out / "summary.md").read_text()
    assert md.startswith(f"# Prefill bound: {s.run}")
    v = s.headline_bound
    assert f"| censoring-aware (headline) | {v.n_prompts} | {v.oracle_mae:.1f} |" in md
    assert f"- **affine law**: {s.verdicts['affine_law']}" in md
    assert "![hazard](hazard.png)" in md and "![sd vs mu](sd_vs_mu.png)" in md  # the report embeds its plots


def test_plots_are_real_images(cli_out: tuple[Path, Path, str], console: str) -> None:
    from matplotlib import image

    out = cli_out[1]
    sizes = {"sd_vs_mu.png": (528, 704), "mae_normal.png": (594, 660), "hazard.png": (484, 1210)}  # inches x 110 dpi
    pixels = {}
    for name in PLOTS:
        img = image.imread(out / name)  # decodes, or raises
        assert img.ndim == 3 and img[..., :3].std() > 0.05, name  # not a blank canvas
        if name in sizes:
            assert img.shape[:2] == sizes[name], name
        pixels[name] = img
    # 4 prompts in the grid: 2 x 2 panels, at least 7 inches wide
    assert pixels["hist_grid.png"].shape[1] == 770


def test_rerun_replaces_the_artifact_and_default_out_dir(
    cli_out: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, _, _ = cli_out
    monkeypatch.chdir(tmp_path)
    for headline in ("capped", "eos"):  # the second run replaces the first artifact in place
        assert main(["bound", str(run), "--no-plots", "--headline", headline, *FAST]) == 0
        s = load_bound(tmp_path / "out" / "bound" / "run")
        assert s.headline == headline
    out = tmp_path / "out" / "bound" / "run"
    assert not any(p.suffix == ".png" for p in out.iterdir())  # --no-plots
    assert ".png" not in (out / "summary.md").read_text()


def test_a_folder_without_meta_json_is_refused(cli_out: tuple[Path, Path, str], tmp_path: Path) -> None:
    """bound files with no meta.json are not a bound artifact: refused, left as they were."""
    run, _, _ = cli_out
    old = tmp_path / "old"
    old.mkdir()
    (old / "bound.json").write_text("{}")
    (old / "summary.md").write_text("# old\n")
    assert main(["bound", str(run), "--out", str(old), "--no-plots", *FAST]) == 1
    assert sorted(p.name for p in old.iterdir()) == ["bound.json", "summary.md"]


def test_length_table_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CSV of lengths gives the same bound as the run it was exported from."""
    run = tmp_path / "run"
    sim.write_synthetic_run(run, sim.ramping_hazard(40, seed=3),
                            sim.Sampling(k=6, max_new_tokens=400, seed=3), text=False)
    df = RunDir.open(run).samples(columns=["prompt_id", "sample_idx", "n_tokens", "stop_reason"])
    df.assign(max_new_tokens=400).sample(frac=1.0, random_state=0).to_csv(tmp_path / "lengths.csv", index=False)
    args = ["--no-plots", *FAST]
    assert main(["bound", str(run), "--out", str(tmp_path / "a"), *args]) == 0
    assert main(["bound", str(tmp_path / "lengths.csv"), "--out", str(tmp_path / "b"), *args]) == 0
    a, b = load_bound(tmp_path / "a"), load_bound(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "meta.json").read_text())["source"] == "table"
    for name in ("censored", "eos", "capped"):
        assert b.variants[name].to_json_dict() == a.variants[name].to_json_dict()  # shuffled rows, same figures
    assert b.counts.prompts_listed is None and b.model is None
    assert np.isfinite(b.affine.alpha)
    assert pd.read_csv(tmp_path / "b" / "per_prompt.csv")["prompt_id"].nunique() == 40
