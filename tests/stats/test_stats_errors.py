"""Bad input: each gives one clear error from the library and a non-zero exit from the CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from lenpred.cli import main
from lenpred.data.rundir import RunDir
from lenpred.errors import CardMismatchError, ConfigError, DataError
from lenpred.stats import BoundConfig, analyse_run
from lenpred.stats import synthetic as sim

QUICK = BoundConfig(n_boot=50, n_boot_robust=5, n_normal_reference=200, n_imputations=4)


def _run(path: Path, rows: list[tuple[str, int, int, str]], cap: int = 100) -> Path:
    """A run from (prompt_id, sample_idx, n_tokens, stop_reason) rows."""
    rd = RunDir.create(path, sim.synthetic_card({"name": "hand"}, cap, 0, 0))
    pids = sorted({r[0] for r in rows})
    rd.write_prompts(
        pd.DataFrame({"prompt_id": pids, "idx": range(len(pids)), "text": pids, "n_prompt_tokens": 0})
    )
    df = pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "n_tokens", "stop_reason"])
    rd.append_samples(df.assign(text=["w " * n for n in df["n_tokens"]]))
    return path


def _cli_fails(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert (
        main(["bound", str(path), "--out", str(path.parent / "out"), "--no-plots", "--n-boot", "50", "--n-normal-reference", "200", *extra])
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("lenpred bound: error: ") and err.count("\n") == 1  # one line
    return err


def test_one_sample_per_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _run(tmp_path / "r", [(f"p{i}", 0, 10 + i, "eos") for i in range(5)])
    with pytest.raises(DataError, match="at least 2 samples per prompt"):
        analyse_run(path, QUICK)
    err = _cli_fails(path, capsys)
    assert "--samples 8" in err  # the fix names how many samples to collect
    assert not (path.parent / "out").exists()  # nothing written


def test_every_sample_truncated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _run(tmp_path / "r", [(f"p{i}", j, 100, "length") for i in range(3) for j in range(4)])
    with pytest.raises(DataError, match="max_new_tokens=100"):
        analyse_run(path, QUICK)
    assert "larger max_new_tokens" in _cli_fails(path, capsys)


def test_prompts_all_truncated_are_dropped_and_counted(tmp_path: Path) -> None:
    rows = [("a", j, 100, "length") for j in range(4)]  # every sample of prompt a is truncated
    rows += [(p, j, 20 + 7 * j + 3 * i, "eos") for i, p in enumerate("bcdefg") for j in range(4)]
    a = analyse_run(_run(tmp_path / "r", rows), QUICK)
    s = a.summary
    assert s.counts.prompts_all_truncated == 1 and s.counts.truncated_samples == 4
    assert s.variants["censored"].dropped_prompts == {"all_truncated": 1}
    assert s.variants["eos"].n_prompts == 6
    assert s.variants["capped"].n_prompts == 7  # served lengths: prompt a is always exactly 100
    capped = a.variants_per_prompt["capped"].set_index("prompt_id")
    assert capped.loc["a", "mae_oracle"] == 0.0 and capped.loc["a", "mean"] == 100.0


def test_headline_variant_with_no_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # each prompt has 2 of 4 samples truncated: the median is not identified, the censoring-aware variant
    # keeps nothing. Asked for explicitly, that is an error; under auto the capped variant takes over.
    rows = [(p, j, 100 if j < 2 else 30 + j, "length" if j < 2 else "eos") for p in "abc" for j in range(4)]
    path = _run(tmp_path / "r", rows)
    with pytest.raises(DataError, match="censoring-aware variant keeps no prompt"):
        analyse_run(path, QUICK.replace(headline="censored"))
    assert "--headline" in _cli_fails(path, capsys, "--headline", "censored")
    a = analyse_run(path, QUICK)
    assert a.summary.headline == "capped" and a.summary.theory_variant == "eos"
    cens = a.summary.variants["censored"]
    assert cens.available is False and "3 half or more truncated" in cens.reason


def test_empty_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    RunDir.create(tmp_path / "r", sim.synthetic_card({"name": "empty"}, 100, 0, 8))
    with pytest.raises(DataError, match="no samples yet"):
        analyse_run(tmp_path / "r", QUICK)
    _cli_fails(tmp_path / "r", capsys)


def test_not_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r").mkdir()
    assert "not a lenpred run directory" in _cli_fails(tmp_path / "r", capsys)


def test_directory_mixing_cards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim.write_synthetic_run(tmp_path / "a", sim.segment_sum(10, seed=0), sim.Sampling(k=4, seed=0))
    sim.write_synthetic_run(tmp_path / "b", sim.segment_sum(10, seed=1), sim.Sampling(k=4, seed=1))
    foreign = RunDir.open(tmp_path / "b").shard_paths()[0]
    shutil.copy(foreign, RunDir.open(tmp_path / "a").samples_dir / "part-00099.parquet")
    with pytest.raises(CardMismatchError):
        analyse_run(tmp_path / "a", QUICK)
    assert "cannot be mixed" in _cli_fails(tmp_path / "a", capsys)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [("min_samples", 1, "use --min-samples 2 or more"), ("ci", 1.5, "[0.5, 1)"),
     ("segment_regex", "(", "does not compile"), ("n_boot", 0, "at least 1"), ("headline", "best", "auto")],
)
def test_bad_configuration(field: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError, match=field) as e:
        BoundConfig.from_dict({field: value})
    assert says in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_configuration_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r"
    sim.write_synthetic_run(path, sim.segment_sum(10, seed=0), sim.Sampling(k=4))
    err = _cli_fails(path, capsys, "--min-samples", "1")
    assert "min_samples: 1 is too small" in err and "use --min-samples 2 or more" in err


def test_partial_run_with_unequal_sample_counts(tmp_path: Path) -> None:
    """A run still being collected: some prompts have 3 samples, some 8, one only 1 (left out)."""
    rows = [("solo", 0, 50, "eos")]
    rows += [(f"p{i}", j, 40 + 5 * i + 3 * j, "eos") for i in range(12) for j in range(3 if i % 2 else 8)]
    a = analyse_run(_run(tmp_path / "r", rows), QUICK)
    v = a.summary.variants["censored"]
    assert v.n_prompts == 12 and v.dropped_prompts == {}
    assert a.summary.counts.prompts_left_out_few_samples == 1  # left out before any variant
    assert v.samples_per_prompt.model_dump() == {"min": 3, "median": 5.5, "max": 8}
    assert {k: b.n_prompts for k, b in v.by_k.items()} == {"3": 6, "8": 6}
    # the by-K figures are the means over each K's prompts
    pp = a.variants_per_prompt["censored"]
    assert v.by_k["8"].oracle_mae == pytest.approx(pp.loc[pp["k"] == 8, "mae_oracle"].mean())
    assert set(a.per_prompt["k"]) == {3, 8}
    cautions = " ".join(a.summary.cautions)
    assert (
        "only 12 prompts" in cautions and "incomplete: 12 of 13" not in cautions
    )  # all 13 listed have samples


def test_tiny_run_mostly_truncated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """3 prompts x 3 samples, 2 of 3 truncated: no prompt keeps 2 samples that ended, so the theory
    checks have nothing to work on. auto refuses in one line (naming the share truncated and the flags
    that analyse the served lengths anyway); with those flags the report says how many were truncated,
    no numpy warning escapes, and the tail check says it could not run."""
    rows = [(f"p{i}", j, 100 if j % 3 else 20 + 5 * j + i, "length" if j % 3 else "eos") for i in range(3)
            for j in range(3)]
    path = _run(tmp_path / "r", rows)
    err = _cli_fails(path, capsys)
    assert "6 of 9 samples (67%) stopped at max_new_tokens=100" in err and "--theory capped" in err
    out = tmp_path / "out"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Mean of empty slice" and friends become failures
        rc = main(["bound", str(path), "--out", str(out), "--n-boot", "50", "--headline", "capped",
                   "--theory", "capped", "--grid", "3", "--n-normal-reference", "200"])
    assert rc == 0
    captured = capsys.readouterr()
    assert "Warning" not in captured.err
    md = (out / "summary.md").read_text()
    assert "6 (66.7%) truncated at max_new_tokens=100" in md
    assert "Tail check: not possible" in md and "0 truncated" not in md
    text = " ".join(captured.out.split())
    assert "6 (66.7%) truncated" in text and "nan" not in text.lower().replace("n/a", "")
