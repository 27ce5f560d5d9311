"""`lenpred bound RUN --out DIR` end to end on a small synthetic run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lenpred import __version__
from lenpred.cli import main
from lenpred.data.rundir import RunDir
from lenpred.stats import simulate as sim


@pytest.fixture(scope="module")
def cli_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("cli")
    sim.write_synthetic_run(base / "run", sim.ramping_hazard(60, seed=9), k=8, max_new_tokens=420, seed=9)
    return base / "run", base / "out"


def test_bound_cli_end_to_end(cli_out: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, out = cli_out
    assert (
        main(["bound", str(run), "--out", str(out), "--boot", "200", "--grid", "4", "--segments", "sentence"])
        == 0
    )
    text = capsys.readouterr().out
    for needle in (
        "oracle MAE",
        "censoring-aware",
        "EOS-only",
        "capped",
        "alpha",
        "R^2",
        "sentence-count CV",
        "Shapiro-Wilk",
        "normal law",
        "hazard ramp",
        "bound.json",
    ):
        assert needle in text, needle
    names = {p.name for p in out.iterdir()}
    assert {
        "bound.json",
        "summary.md",
        "per_prompt.csv",
        "hist_grid.png",
        "sd_vs_mu.png",
        "hazard.png",
        "mae_normal.png",
    } <= names
    for png in ("hist_grid.png", "sd_vs_mu.png", "hazard.png", "mae_normal.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"

    raw = (out / "bound.json").read_text()
    assert "NaN" not in raw and "Infinity" not in raw  # strict JSON
    b = json.loads(raw)
    assert b["card_hash"] == RunDir.open(run).card_hash
    assert b["lenpred_version"] == __version__
    assert b["config"]["n_boot"] == 200 and b["config"]["segment_unit"] == "sentence"
    v = b["variants"]["censored"]
    assert v["oracle_mae_ci"][0] < v["oracle_mae"] < v["oracle_mae_ci"][1]
    assert 0 < v["relative_mae"] < 1
    assert {"alpha", "b", "r2", "alpha_ci", "robust"} <= set(b["affine"])
    assert b["segments"]["unit"] == "sentence"
    assert set(b["verdicts"]) == {"normal_law", "affine_law", "alpha_is_segment_cv", "hazard_ramp"}
    assert len(b["hazard"]["pooled"]["table"]["hazard"]) > 5

    md = (out / "summary.md").read_text()
    assert md.startswith("# Prefill bound") and "| censoring-aware (headline) |" in md
    assert "![hazard](hazard.png)" in md and "![sd vs mu](sd_vs_mu.png)" in md  # the report embeds its plots


def test_bound_cli_default_out_dir(
    cli_out: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, _ = cli_out
    monkeypatch.chdir(tmp_path)
    assert main(["bound", str(run), "--no-plots", "--boot", "50", "--headline", "capped"]) == 0
    b = json.loads((tmp_path / "out" / "bound" / "run" / "bound.json").read_text())
    assert b["headline"] == "capped"
    assert ".png" not in (tmp_path / "out" / "bound" / "run" / "summary.md").read_text()  # --no-plots
