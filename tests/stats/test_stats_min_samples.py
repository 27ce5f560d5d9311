"""--min-samples selects prompts by how many samples they have in the run, not by their EOS count.

A run extended to K = 24 on some prompts (the reference run's design) is analysed on those prompts
with --min-samples 24; a prompt with a truncated sample must stay in the EOS-only variant (it has
23 EOS samples), or the theory checks lose exactly the long, high-variance prompts.
"""

from __future__ import annotations

from pathlib import Path

from lenpred.data.rundir import RunDir
from lenpred.stats import BoundConfig, analyse_run
from lenpred.stats import synthetic as sim

FAST = BoundConfig(n_boot=100, n_boot_robust=20, n_normal_reference=500, n_imputations=5)


def _thin(path: Path, keep_k: int, every: int) -> int:
    """Cut every ``every``-th prompt down to its first ``keep_k`` samples; returns how many were cut."""
    rd = RunDir.open(path)
    df = rd.samples()
    ids = list(dict.fromkeys(df["prompt_id"]))
    cut = set(ids[::every])
    df = df[~df["prompt_id"].isin(cut) | (df["sample_idx"] < keep_k)]
    for p in rd.shard_paths():
        p.unlink()
    rd.append_samples(df.reset_index(drop=True))
    return len(cut)


def test_min_samples_selects_prompts_by_run_k(tmp_path: Path) -> None:
    path = tmp_path / "r"
    sim.write_synthetic_run(path, sim.ramping_hazard(60, seed=5),
                            sim.Sampling(k=12, max_new_tokens=450, seed=5))
    n_cut = _thin(path, keep_k=4, every=3)
    full = analyse_run(path, FAST)
    sel = analyse_run(path, _with(FAST, 12))
    c = sel.summary.counts
    assert c.prompts == 60 - n_cut and c.prompts_left_out_few_samples == n_cut
    assert c.samples_per_prompt.min == 12
    assert full.summary.counts.prompts_left_out_few_samples == 0
    # prompts with some truncated samples are still in the EOS-only variant
    pp = sel.variants_per_prompt["eos"]
    assert (pp["n_truncated"] > 0).any()
    assert sel.summary.variants["eos"].n_prompts == sel.summary.variants["capped"].n_prompts
    assert not any("incomplete" in x for x in sel.summary.cautions)


def test_min_samples_same_as_default_on_equal_k(censored_run) -> None:
    k = censored_run.summary.counts.samples_per_prompt.max
    again = analyse_run(censored_run.path, _with(FAST, k))
    for v in ("eos", "censored", "capped"):
        assert again.summary.variants[v].n_prompts == censored_run.summary.variants[v].n_prompts


def test_min_samples_above_every_prompt_suggests_what_works(tmp_path: Path) -> None:
    """--min-samples 1000 on a K = 12 run: the fix is --min-samples 12 (not 'collect --samples 8')."""
    import pytest

    from lenpred.errors import DataError

    path = tmp_path / "r"
    sim.write_synthetic_run(path, sim.ramping_hazard(10, seed=5),
                            sim.Sampling(k=12, max_new_tokens=450, seed=5))
    with pytest.raises(DataError) as e:
        analyse_run(path, _with(FAST, 1000))
    assert "the most any prompt has is 12" in e.value.problem
    assert e.value.fix.startswith("use --min-samples 12 or less") and "--samples 8" not in e.value.fix


def _with(cfg: BoundConfig, min_samples: int) -> BoundConfig:
    return cfg.replace(min_samples=min_samples)
