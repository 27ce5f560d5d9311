"""Bad inputs of `lenpred bound` (rows for tests/test_bad_input.py): exit 1, one line, nothing written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bad_input_harness import BadInput

FAST = ["--n-boot", "20", "--n-normal-reference", "100", "--no-plots"]


def _synthetic(k: int):
    def setup(tmp: Path) -> dict[str, Path]:
        from lenpred.stats import synthetic as sim

        sim.write_synthetic_run(tmp / "run", sim.ramping_hazard(6, seed=1),
                                sim.Sampling(k=k, max_new_tokens=450, seed=1))
        return {"run": tmp / "run"}

    return setup


def _tiny_mostly_truncated(tmp: Path) -> dict[str, Path]:
    """3 prompts x 3 samples, two of each prompt's three cut at the cap."""
    from lenpred.data.rundir import RunDir
    from lenpred.stats import synthetic as sim

    rd = RunDir.create(tmp / "run", sim.synthetic_card({"name": "tiny"}, 100, 0, 3))
    pids = ["p0", "p1", "p2"]
    rd.write_prompts(pd.DataFrame({"prompt_id": pids, "idx": range(3), "text": pids, "n_prompt_tokens": 0}))
    rows = [(p, j, 100 if j else 20 + i, "length" if j else "eos") for i, p in enumerate(pids) for j in range(3)]
    df = pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "n_tokens", "stop_reason"])
    rd.append_samples(df.assign(text=["w " * n for n in df["n_tokens"]]))
    return {"run": tmp / "run"}


def _table(text: str, name: str = "lengths.csv"):
    def setup(tmp: Path) -> dict[str, Path]:
        (tmp / name).write_text(text)
        return {"table": tmp / name}

    return setup


def _users_dir(tmp: Path) -> dict[str, Path]:
    out = _synthetic(4)(tmp)
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("my own file\n")
    return {**out, "out": tmp / "mine"}


GOOD_ROWS = "prompt_id,n_tokens\na,3\na,5\nb,7\nb,9\n"

CASES: list[BadInput] = [
    BadInput("bound-min-samples-above-every-prompt", ["bound", "{run}", "--out", "{tmp}/out", "--min-samples", "1000", *FAST],
             _synthetic(4), expect="use --min-samples 4 or less"),
    BadInput("bound-one-sample-per-prompt", ["bound", "{run}", "--out", "{tmp}/out", *FAST],
             _synthetic(1), expect="collect with --samples 8"),
    BadInput("bound-tiny-run-mostly-truncated", ["bound", "{run}", "--out", "{tmp}/out", *FAST],
             _tiny_mostly_truncated, expect="6 of 9 samples (67%) stopped at max_new_tokens=100"),
    BadInput("bound-missing-path", ["bound", "{tmp}/nowhere", "--out", "{tmp}/out"], None, expect="does not exist"),
    BadInput("bound-text-file", ["bound", "{table}", "--out", "{tmp}/out"], _table(GOOD_ROWS, "lengths.txt"),
             expect="not a .csv or .parquet table"),
    BadInput("bound-out-is-users-dir", ["bound", "{run}", "--out", "{out}", *FAST], _users_dir,
             expect="not a lenpred artifact"),
    BadInput("bound-bad-ci", ["bound", "{run}", "--ci", "1.5", "--out", "{tmp}/out"], _synthetic(4), expect="ci: 1.5 must be in [0.5, 1)"),
    BadInput("bound-cap-flag-on-a-run", ["bound", "{run}", "--max-new-tokens", "99", "--out", "{tmp}/out"],
             _synthetic(4), expect="--max-new-tokens is for a length table"),
    BadInput("bound-table-missing-column", ["bound", "{table}", "--out", "{tmp}/out"],
             _table("prompt_id,length\na,3\na,4\n"), expect="lacks column(s) n_tokens"),
    BadInput("bound-table-non-numeric", ["bound", "{table}", "--out", "{tmp}/out"],
             _table("prompt_id,n_tokens\na,3\na,lots\n"), expect="n_tokens is 'lots' on line 3, not a number"),
    BadInput("bound-table-fractional", ["bound", "{table}", "--out", "{tmp}/out"],
             _table("prompt_id,n_tokens\na,3\na,4.5\n"), expect="token counts are whole numbers"),
    BadInput("bound-table-negative", ["bound", "{table}", "--out", "{tmp}/out"],
             _table("prompt_id,n_tokens\na,3\na,-1\n"), expect="n_tokens is -1 on line 3, below 0"),
    BadInput("bound-table-unknown-stop-reason", ["bound", "{table}", "--out", "{tmp}/out"],
             _table("prompt_id,n_tokens,stop_reason\na,3,eos\na,4,timeout\n"), expect="stop_reason 'timeout' on line 3"),
    BadInput("bound-table-mixed-max-new-tokens", ["bound", "{table}", "--out", "{tmp}/out"],
             _table("prompt_id,n_tokens,max_new_tokens\na,3,256\na,4,512\n"), expect="max_new_tokens differs between rows"),
    BadInput("bound-table-cut-without-cap", ["bound", "{table}", "--out", "{tmp}/out"],
             _table("prompt_id,n_tokens,stop_reason\na,3,eos\na,4,length\n"), expect="pass --max-new-tokens"),
]
