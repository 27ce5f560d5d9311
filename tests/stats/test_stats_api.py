"""The Python API of the bound, as docs/bound.md and the README show it: public names, typed results."""

from __future__ import annotations

from pathlib import Path

import pytest

import lenpred.stats as stats_api
from lenpred.data.rundir import RunDir
from lenpred.stats import BoundConfig, analyse_lengths, analyse_run, load_bound
from lenpred.stats import synthetic as sim


def test_public_names() -> None:
    for name in stats_api.__all__:
        assert hasattr(stats_api, name), name


def test_documented_example(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sim.write_synthetic_run(run, sim.segment_sum(40, seed=8), sim.Sampling(k=8, seed=8))
    cfg = BoundConfig(n_boot=100, n_boot_robust=10, n_normal_reference=300)
    a = analyse_run(run, cfg)
    b = a.summary.headline_bound
    assert b.oracle_mae_ci[0] < b.oracle_mae < b.oracle_mae_ci[1] and 0 < b.relative_mae < 1
    assert a.summary.verdicts["normal_law"].status in ("HOLDS", "HOLDS ON AGGREGATE ONLY")
    assert a.summary.affine.available and a.summary.affine.alpha > 0
    assert len(a.per_prompt) == 40

    # the same lengths as a DataFrame (what a user with another sampler has)
    df = RunDir.open(run).samples(columns=["prompt_id", "n_tokens", "stop_reason"])
    t = analyse_lengths(df.assign(max_new_tokens=4096), cfg)
    assert t.summary.headline_bound.oracle_mae == pytest.approx(b.oracle_mae, rel=1e-12)

    from lenpred.stats.artifact import write_bound

    write_bound(a, tmp_path / "out")
    back = load_bound(tmp_path / "out", card=RunDir.open(run).card)
    assert back.to_json_dict() == a.summary.to_json_dict()  # typed, to JSON and back, nothing lost (NaN != NaN)


def test_config_is_strict() -> None:
    from lenpred.errors import ConfigError

    with pytest.raises(ConfigError, match="n_bot: unknown key"):
        BoundConfig.from_dict({"n_bot": 5})
    assert BoundConfig().replace(n_boot=7).n_boot == 7
    assert "n_boot" in BoundConfig.json_schema()["properties"]
