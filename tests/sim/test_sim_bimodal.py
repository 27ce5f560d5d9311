"""The bimodal workload (``LengthConfig.mix_short_share``, issue 37 part 3): proportions, classes, seeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import ConfigError
from lenpred.sim.config import LengthConfig, WorkloadConfig
from lenpred.sim.workload import build_workload, mixed_rows

RUN = Path(__file__).resolve().parents[2] / "data" / "runs" / "smollm2-sharegpt"


def _pool() -> pd.DataFrame:
    # outputs 1..100: the 0.5 quantile is 50.5, the 0.85 quantile 85.15
    return pd.DataFrame({"prompt_tokens": np.full(100, 10), "output_tokens": np.arange(1, 101)})


def test_the_mix_has_its_exact_proportions_and_classes() -> None:
    df = mixed_rows(_pool(), 1000, np.random.default_rng(0), 0.8, 0.5, 0.85)
    out = df["output_tokens"].to_numpy()
    assert len(df) == 1000
    assert int((out <= 50).sum()) == 800 and int((out >= 86).sum()) == 200  # nothing in between
    assert set(out[out <= 50]) <= set(range(1, 51)) and len(set(out[out <= 50])) > 40  # the whole short class
    # the classes are interleaved, not in two blocks
    first = out[:100]
    assert 0 < int((first >= 86).sum()) < 100


def test_the_mix_is_deterministic_by_seed() -> None:
    a = mixed_rows(_pool(), 500, np.random.default_rng(3), 0.8, 0.5, 0.85)
    b = mixed_rows(_pool(), 500, np.random.default_rng(3), 0.8, 0.5, 0.85)
    c = mixed_rows(_pool(), 500, np.random.default_rng(4), 0.8, 0.5, 0.85)
    assert a.equals(b) and not a.equals(c)


@pytest.mark.skipif(not (RUN / "card.json").is_file(), reason="the reference run is not in this checkout")
def test_a_run_directory_workload_mixes_its_own_samples() -> None:
    lc = LengthConfig(source="rundir", path=str(RUN), roles=("test",), min_tokens=1, mix_short_share=0.8)
    w1 = build_workload(WorkloadConfig(n_requests=2000, lengths=lc), seed=1)
    w2 = build_workload(WorkloadConfig(n_requests=2000, lengths=lc), seed=1)
    assert np.array_equal(w1.output, w2.output) and w1.keys.equals(w2.keys)  # by seed
    assert w1.mix_bounds is not None
    lo, hi = w1.mix_bounds  # the pool's (the run's test samples') median and 0.85 quantile of true output
    assert 100 < lo < hi
    assert int((w1.output <= lo).sum()) == 1600 and int((w1.output >= hi).sum()) == 400
    # every request is one of the run's own samples: the predictions tables have its row
    keys = set(map(tuple, w1.population[["prompt_id", "sample_idx"]].to_numpy().tolist()))
    assert set(map(tuple, w1.keys.to_numpy().tolist())) <= keys
    assert w1.keys.drop_duplicates().shape[0] > 500  # drawn across each class, not a few samples


def test_the_mix_is_left_out_of_the_written_config_when_unset() -> None:
    assert not any(k.startswith("mix_") for k in LengthConfig().to_dict())
    d = LengthConfig(source="sharegpt", mix_short_share=0.8).to_dict()
    assert d["mix_short_share"] == 0.8 and "mix_long_above" not in d
    assert LengthConfig(source="sharegpt", mix_short_share=0.8).mix == (0.8, 0.5, 0.85)


@pytest.mark.parametrize(("kw", "says", "fix"), [
    ({"source": "synthetic", "mix_short_share": 0.8}, "sources rundir, sharegpt only", "drop the mix"),
    ({"source": "sharegpt", "mix_short_share": 1.0}, "must be in (0, 1)", "e.g. 0.8"),
    ({"source": "sharegpt", "mix_short_share": 0.8, "mix_short_below": 0.9, "mix_long_above": 0.5},
     "0 < mix_short_below <= mix_long_above < 1", "e.g. mix_short_below 0.5"),
    ({"source": "sharegpt", "mix_long_above": 0.9}, "read only with workload.lengths.mix_short_share", "set"),
])
def test_bad_mixes_are_refused_naming_the_fix(kw: dict, says: str, fix: str) -> None:
    with pytest.raises(ConfigError) as e:
        LengthConfig(**kw)
    assert says in str(e.value) and fix in str(e.value)
