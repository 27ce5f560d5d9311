"""The ``alpaca-eval`` prompt source: AlpacaEval's instructions read from the alpaca-eval sdist.

Synthetic sdists (tarballs laid out like the real one) carry the known answers; the one test on the
real sdist runs where ``make install`` downloaded it and is skipped elsewhere.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from lenpred.data import alpaca_eval
from lenpred.data.sources import PromptConfig, build_prompt_table, load_raw
from lenpred.errors import DataError

RECORDS = [
    {"instruction": "Name three rivers in Europe.", "output": "Danube, Rhine, Loire.", "generator": "example", "dataset": "helpful_base"},
    {"instruction": "Write a haiku about rain.", "output": "Soft rain on the roof", "generator": "example", "dataset": "koala"},
    {"instruction": "write a haiku about RAIN. ", "output": "a duplicate, lower-cased", "generator": "example", "dataset": "oasst"},
    {"instruction": "Explain recursion to a child.", "generator": "example", "dataset": "vicuna"},
    {"instruction": "List " + "many " * 30 + "things.", "output": "", "dataset": "selfinstruct"},
    {"instruction": "Say hi.", "output": "hi", "dataset": "selfinstruct"},
    {"instruction": "Sort 3 1 2.", "output": "1 2 3", "dataset": "oasst"},
]


def _sdist(path: Path, records: list | None = None, member: str | None = alpaca_eval.MEMBER) -> Path:
    """A tarball laid out like alpaca_eval-0.6.6.tar.gz: a top folder, code, and example/outputs.json."""
    top = path.name.removesuffix(".tar.gz")
    files = {f"{top}/setup.py": b"from setuptools import setup\n", f"{top}/src/alpaca_eval/__init__.py": b""}
    if member is not None:
        files[f"{top}/{member}"] = json.dumps(records if records is not None else RECORDS, indent=4).encode()
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture()
def dirs(tmp_path, monkeypatch) -> list[Path]:
    """Two empty search folders in place of the venv's share folder and the cache."""
    ds = [tmp_path / "venv-share", tmp_path / "cache"]
    for d in ds:
        d.mkdir()
    monkeypatch.setattr(alpaca_eval, "search_dirs", lambda: ds)
    return ds


def test_reads_the_sdist_without_extracting(tmp_path, dirs):
    tar = _sdist(dirs[1] / alpaca_eval.SDIST)  # found in the second folder
    raw = load_raw(PromptConfig(source="alpaca-eval"))
    assert list(raw.id) == ["helpful_base-000", "koala-001", "oasst-002", "vicuna-003", "selfinstruct-004", "selfinstruct-005", "oasst-006"]
    assert raw.iloc[0].prompt == "Name three rivers in Europe." and raw.iloc[0].answer == "Danube, Rhine, Loire."
    assert raw.iloc[3].answer == ""  # no output: no reference answer
    member = json.dumps(RECORDS, indent=4).encode()
    assert raw.attrs["sha256"] == hashlib.sha256(member).hexdigest()  # the JSON's hash, not the tarball's
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [alpaca_eval.SDIST]  # nothing extracted
    # the same records given as an extracted JSON file: the same frame and the same hash
    js = tmp_path / "outputs.json"
    js.write_bytes(member)
    again = load_raw(PromptConfig(source="alpaca-eval", path=str(js)))
    assert again.equals(raw) and again.attrs["sha256"] == raw.attrs["sha256"]
    # an explicit path to the tarball wins over the search folders
    other = _sdist(tmp_path / "alpaca_eval-9.9.tar.gz", RECORDS[:2])
    assert len(load_raw(PromptConfig(source="alpaca-eval", path=str(other)))) == 2
    assert tar.is_file()


def test_venv_share_folder_is_searched_first(dirs):
    _sdist(dirs[0] / alpaca_eval.SDIST, RECORDS[:1])
    _sdist(dirs[1] / alpaca_eval.SDIST, RECORDS)
    assert len(load_raw(PromptConfig(source="alpaca-eval"))) == 1


def test_missing_sdist_names_the_pip_command(dirs):
    with pytest.raises(DataError) as e:
        load_raw(PromptConfig(source="alpaca-eval"))
    msg = str(e.value)
    assert "the AlpacaEval prompts are not downloaded" in msg and str(dirs[0]) in msg and str(dirs[1]) in msg
    assert f'pip download --no-deps --no-binary :all: "alpaca-eval=={alpaca_eval.VERSION}" -d {dirs[0]}' in msg


def test_normalised_like_sharegpt(dirs, word_tok):
    """Dedup (case and spaces), the max-prompt-tokens filter, the seeded order that only extends."""
    _sdist(dirs[0] / alpaca_eval.SDIST)
    cfg = PromptConfig(source="alpaca-eval", seed=1, max_prompt_tokens=20)
    t3, stats = build_prompt_table(cfg, word_tok, 3, context_length=200, max_new_tokens=10)
    t5, _ = build_prompt_table(cfg, word_tok, 5, context_length=200, max_new_tokens=10)
    assert list(t5.prompt_id[:3]) == list(t3.prompt_id)  # raising N extends, never reorders
    assert stats["records"] == 7 and stats["after_dedup"] == 6  # "write a haiku about RAIN. " duplicates koala-001
    assert "oasst-002" not in set(t5.prompt_id)
    assert "selfinstruct-004" not in set(t5.prompt_id)  # 34 tokens rendered > 20; counted in the error below
    assert t5.iloc[0].rendered.startswith("<user> ")  # the chat template, as for ShareGPT
    assert stats["dataset_sha256"] == load_raw(cfg).attrs["sha256"]
    other, _ = build_prompt_table(PromptConfig(source="alpaca-eval", seed=2, max_prompt_tokens=20), word_tok, 5, 200, 10)
    assert list(other.prompt_id) != list(t5.prompt_id)
    with pytest.raises(DataError, match=r"only 5 of 7 prompts pass the filters \(0 empty, 1 duplicates, 1 longer than"):
        build_prompt_table(cfg, word_tok, 6, 200, 10)


@pytest.mark.parametrize(
    ("records", "expect"),
    [
        ([{"output": "no instruction"}], r"record 0 \(0-based\) 'instruction' is missing"),
        ([{"instruction": "ok"}, {"instruction": 7}], r"record 1 \(0-based\) 'instruction' is a JSON int, not a string"),
        ([{"instruction": "ok", "output": ["a"]}], r"record 0 \(0-based\) 'output' is a JSON list"),
        (["just a string"], r"record 0 \(0-based\) is not an object"),
        ({"instruction": "an object, not an array"}, r"is a JSON dict, not an array of records"),
        ([], "holds no records"),
    ],
)
def test_bad_records_are_named(tmp_path, records, expect):
    tar = _sdist(tmp_path / alpaca_eval.SDIST, records)
    with pytest.raises(DataError, match=expect):
        load_raw(PromptConfig(source="alpaca-eval", path=str(tar)))


def test_bad_files(tmp_path):
    no_member = _sdist(tmp_path / "alpaca_eval-0.6.6.tar.gz", member=None)
    with pytest.raises(DataError, match=r"holds no example/outputs.json: it is not the alpaca-eval source distribution.*pip download"):
        load_raw(PromptConfig(source="alpaca-eval", path=str(no_member)))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(_sdist(tmp_path / "whole.tar.gz").read_bytes()[:200])
    with pytest.raises(DataError, match=r"cut.tar.gz is not a readable .tar.gz .*delete it and download it again"):
        load_raw(PromptConfig(source="alpaca-eval", path=str(cut)))
    bad_json = tmp_path / "outputs.json"
    bad_json.write_text('[{"instruction": "ok"},\n {"instruction": oops}]')
    with pytest.raises(DataError, match=r"outputs.json:2 is not valid JSON"):
        load_raw(PromptConfig(source="alpaca-eval", path=str(bad_json)))
    txt = tmp_path / "notes.txt"
    txt.write_text("hello")
    with pytest.raises(DataError, match=r"notes.txt is neither the alpaca-eval sdist \(.tar.gz\) nor an AlpacaEval JSON file"):
        load_raw(PromptConfig(source="alpaca-eval", path=str(txt)))
    with pytest.raises(DataError, match="is a directory"):
        load_raw(PromptConfig(source="alpaca-eval", path=str(tmp_path)))
    with pytest.raises(DataError, match=r"nowhere.tar.gz does not exist"):
        load_raw(PromptConfig(source="alpaca-eval", path=str(tmp_path / "nowhere.tar.gz")))


def _real_sdist() -> Path | None:
    try:
        return alpaca_eval.find_sdist()
    except DataError:
        return None


@pytest.mark.skipif(_real_sdist() is None, reason="the alpaca-eval sdist is not downloaded (make install does it)")
def test_real_sdist_holds_the_805_instructions():
    raw = load_raw(PromptConfig(source="alpaca-eval"))
    assert len(raw) == 805 and raw.attrs["sha256"] == alpaca_eval.SHA256
    assert raw.subset.value_counts().to_dict() == {"selfinstruct": 252, "oasst": 188, "koala": 156, "helpful_base": 129, "vicuna": 80}
    assert raw["prompt"].str.strip().str.len().min() > 0 and raw.id.is_unique
