"""Plain length tables (CSV / Parquet) as input to the bound: known answers, and every bad cell refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import DataError
from lenpred.stats import BoundConfig, analyse_lengths, read_length_table

QUICK = BoundConfig(n_boot=50, n_boot_robust=5, n_normal_reference=200, n_imputations=4)
A = 100 + 10 * np.arange(12)  # per-prompt base length a_i
D = 5 + np.arange(12)  # per-prompt step d_i: samples a, a + d, a + 2d


def _rows(truncate_last: set[int] = frozenset(), cap: int | None = None) -> pd.DataFrame:
    """Prompt i has samples a_i, a_i + d_i, a_i + 2 d_i; for i in ``truncate_last`` the last one is the cap
    (stop_reason length), with the cap chosen as a_i + 2 d_i so the capped lengths are the same."""
    rows = []
    for i, (a, d) in enumerate(zip(A, D, strict=True)):
        for j in range(3):
            cut = i in truncate_last and j == 2
            rows.append({"prompt_id": f"q{i:02d}", "n_tokens": int(a + j * d), "stop_reason": "length" if cut else "eos"})
    df = pd.DataFrame(rows)
    if cap is not None:
        df["max_new_tokens"] = cap
    return df


def test_known_answer_three_samples_per_prompt(tmp_path: Path) -> None:
    """With samples (a, a + d, a + 2d): in-sample MAE 2d/3, leave-one-out MAE d (medians a + 1.5d, a + d,
    a + 0.5d of the others), so the oracle (their geometric mean) is d sqrt(2/3); the variance is d^2."""
    path = tmp_path / "lengths.csv"
    _rows().sample(frac=1.0, random_state=1).to_csv(path, index=False)  # row order must not matter
    s = analyse_lengths(path, QUICK).summary
    assert s.counts.prompts == 12 and s.counts.samples == 36 and s.counts.truncated_samples == 0
    assert s.counts.max_new_tokens == int((A + 2 * D).max())  # no cap given, nothing cut: the longest
    for name in ("censored", "eos", "capped"):
        v = s.variants[name]
        assert v.oracle_mae_insample == pytest.approx(np.mean(2 * D / 3))
        assert v.oracle_mae_loo == pytest.approx(np.mean(D))
        assert v.oracle_mae == pytest.approx(np.mean(D) * np.sqrt(2 / 3))
        assert v.oracle_mse == pytest.approx(np.mean(D**2.0))
        assert v.mean_length == pytest.approx(np.mean(A + D))
        assert v.relative_mae == pytest.approx(np.sum(D * np.sqrt(2 / 3)) / np.sum(A + D))
    # sd = d exactly and the means a + d grow with d: the affine fit is exact up to the c4 correction
    assert s.model is None and s.counts.prompts_listed is None
    assert s.segments.available is False  # no text column


def _oracle_by_definition(x: list[float]) -> float:
    """sqrt(in-sample MAE x leave-one-out MAE) of one prompt, straight from the definitions."""
    from statistics import median

    ins = sum(abs(v - median(x)) for v in x) / len(x)
    loo = sum(abs(v - median(x[:j] + x[j + 1 :])) for j, v in enumerate(x)) / len(x)
    return float(np.sqrt(ins * loo))


def test_known_answer_with_truncation_csv_and_parquet(tmp_path: Path) -> None:
    """Prompts 0-3 have their longest sample cut at the cap 300: the capped variant counts it as 300, the
    EOS-only variant keeps their 2 other samples; both bounds follow from the definitions by hand."""
    cut, cap = {0, 1, 2, 3}, 300
    df = _rows(cut, cap=cap)
    df.loc[df["stop_reason"] == "length", "n_tokens"] = cap
    df.loc[df["stop_reason"] == "eos", "stop_reason"] = "stop"  # OpenAI / vLLM's word for EOS
    df.to_csv(tmp_path / "t.csv", index=False)
    df.to_parquet(tmp_path / "t.parquet", index=False)
    a = analyse_lengths(tmp_path / "t.csv", QUICK).summary
    b = analyse_lengths(tmp_path / "t.parquet", QUICK).summary
    assert a.variants == b.variants  # the same table in either format: the same figures
    assert a.counts.truncated_samples == 4 and a.counts.max_new_tokens == cap
    served = [[a_, a_ + d, cap if i in cut else a_ + 2 * d] for i, (a_, d) in enumerate(zip(A, D, strict=True))]
    ended = [x[:2] if i in cut else x for i, x in enumerate(served)]
    assert a.variants["capped"].oracle_mae == pytest.approx(np.mean([_oracle_by_definition(x) for x in served]))
    v = a.variants["eos"]
    assert v.oracle_mae == pytest.approx(np.mean([_oracle_by_definition(x) for x in ended]))
    assert {k: x.n_prompts for k, x in v.by_k.items()} == {"2": 4, "3": 8}


def test_without_stop_reason_the_cap_marks_truncation(tmp_path: Path) -> None:
    df = _rows().drop(columns="stop_reason")
    cap = int(A[0] + 2 * D[0])  # 110: prompt 0's longest sample reaches it
    df["n_tokens"] = df["n_tokens"].clip(upper=cap)
    df.to_csv(tmp_path / "t.csv", index=False)
    lengths = read_length_table(tmp_path / "t.csv", max_new_tokens=cap)
    reached = lengths.samples["length"] >= cap
    assert lengths.cap == cap and (lengths.samples["censored"] == reached).all() and reached.sum() > 1


def test_sample_idx_orders_samples_and_text_is_kept(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {"prompt_id": ["b", "a", "a", "b"], "sample_idx": [1, 1, 0, 0], "n_tokens": [4, 2, 1, 3],
         "text": ["w w w w", "w w", "w", "w w w"]}
    )
    s = read_length_table(df).samples
    assert s["prompt_id"].tolist() == ["a", "a", "b", "b"] and s["length"].tolist() == [1, 2, 3, 4]
    assert s["text"].tolist() == ["w", "w w", "w w w", "w w w w"]


BAD = [
    # (id, csv text, extra kwargs, what the one-line error must say)
    ("missing-column", "prompt_id,tokens\na,3\n", {}, "lacks column(s) n_tokens (it has: prompt_id, tokens)"),
    ("non-numeric", "prompt_id,n_tokens\na,3\na,many\n", {}, "n_tokens is 'many' on line 3, not a number"),
    ("fractional", "prompt_id,n_tokens\na,3\na,4.5\n", {}, "n_tokens is 4.5 on line 3: token counts are whole numbers"),
    ("negative", "prompt_id,n_tokens\na,3\na,-2\n", {}, "n_tokens is -2 on line 3, below 0"),
    ("empty-cell", "prompt_id,n_tokens\na,3\na,\n", {}, "n_tokens is empty on line 3"),
    ("unknown-stop", "prompt_id,n_tokens,stop_reason\na,3,eos\na,4,abort\n", {},
     "stop_reason 'abort' on line 3 is not one lenpred knows"),
    ("mixed-cap", "prompt_id,n_tokens,max_new_tokens\na,3,512\na,4,1024\n", {},
     "max_new_tokens differs between rows (512 on line 2, 1024 on line 3)"),
    ("cut-without-cap", "prompt_id,n_tokens,stop_reason\na,3,eos\na,9,length\n", {},
     "has 1 responses cut at the cap (stop_reason 'length') but no max_new_tokens"),
    ("above-cap", "prompt_id,n_tokens,max_new_tokens\na,3,8\na,9,8\n", {}, "n_tokens is 9 on line 3, above max_new_tokens 8"),
    ("cap-contradicts", "prompt_id,n_tokens,max_new_tokens\na,3,8\na,4,8\n", {"max_new_tokens": 9},
     "--max-new-tokens 9 contradicts the table's max_new_tokens column (8)"),
    ("duplicate-idx", "prompt_id,n_tokens,sample_idx\na,3,0\na,4,0\n", {}, "prompt 'a' has sample_idx 0 twice (again on line 3)"),
    ("no-rows", "prompt_id,n_tokens\n", {}, "has no rows"),
    ("empty-id", "prompt_id,n_tokens\na,3\n,4\n", {}, "prompt_id is empty on line 3"),
]


@pytest.mark.parametrize(("case", "text", "kw", "says"), BAD, ids=[b[0] for b in BAD])
def test_bad_tables_are_refused(tmp_path: Path, case: str, text: str, kw: dict, says: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(DataError) as e:
        read_length_table(path, **kw)
    assert says in e.value.problem
    assert e.value.fix and "\n" not in str(e.value)


def test_bad_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text("{}")
    with pytest.raises(DataError, match="unknown table format"):
        read_length_table(tmp_path / "t.json")
    (tmp_path / "t.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="not a readable Parquet file"):
        read_length_table(tmp_path / "t.parquet")
    with pytest.raises(DataError, match="does not exist"):
        read_length_table(tmp_path / "missing.csv")


def test_too_few_samples_in_a_table(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("prompt_id,n_tokens\na,3\nb,4\n")
    with pytest.raises(DataError) as e:
        read_length_table(tmp_path / "t.csv")
    assert "no prompt has 2 or more samples" in e.value.problem
