"""Prompt sources: ShareGPT recovery from a truncated file, local formats, bad input, seeded order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lenpred.data.sharegpt import recover_records
from lenpred.data.sources import PromptConfig, build_prompt_table, load_raw
from lenpred.errors import ConfigError, DataError, UnknownKeyError


def _conv(i: int, prompt: str, answer: str = "an answer") -> dict:
    return {"id": f"c{i}", "conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]}


def test_recover_truncated_array():
    recs = [_conv(i, f"prompt {i}") for i in range(3)]
    text = json.dumps(recs, indent=2)
    cut = text[: text.index('"c2"') + 10]  # cut inside the third record
    got, dropped = recover_records(cut)
    assert [r["id"] for r in got] == ["c0", "c1"]
    assert dropped > 0
    full, dropped_full = recover_records(text)
    assert len(full) == 3 and dropped_full == 0


def test_sharegpt_file_truncated_and_first_turn(tmp_path, word_tok):
    recs = [_conv(i, f"question number {i}", "word " * (i + 1)) for i in range(5)]
    text = json.dumps(recs)
    p = tmp_path / "sg.json"
    p.write_text(text[:-40])  # truncated like the packaged file
    raw = load_raw(PromptConfig(source="sharegpt-file", path=str(p)))
    assert len(raw) == 4
    assert raw.iloc[0].prompt == "question number 0"
    assert raw.attrs["sha256"]


def test_jsonl_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": oops}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2 is not valid JSON"):
        load_raw(PromptConfig(source="jsonl", path=str(bad)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="is empty"):
        load_raw(PromptConfig(source="jsonl", path=str(empty)))
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text('{"text": "hello"}\n')
    with pytest.raises(DataError, match=r"nofield.jsonl:1: the record has no 'prompt' field"):
        load_raw(PromptConfig(source="jsonl", path=str(nofield)))
    with pytest.raises(DataError, match="does not exist"):
        load_raw(PromptConfig(source="jsonl", path=str(tmp_path / "missing.jsonl")))
    with pytest.raises(ConfigError, match="needs a file"):
        load_raw(PromptConfig(source="jsonl"))


def test_unknown_source_lists_valid():
    with pytest.raises(UnknownKeyError, match="alpaca.*jsonl.*sharegpt"):
        PromptConfig(source="nope")


def test_alpaca(tmp_path, word_tok):
    p = tmp_path / "a.json"
    p.write_text(json.dumps([{"instruction": "Translate", "input": "hello", "output": "bonjour"}, {"instruction": "Count to three"}]))
    raw = load_raw(PromptConfig(source="alpaca", path=str(p)))
    assert raw.iloc[0].prompt == "Translate\n\nhello" and raw.iloc[0].answer == "bonjour"


def _jsonl(tmp_path, prompts: list[str]):
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "prompt": t}) + "\n" for i, t in enumerate(prompts)))
    return p


def test_table_seeded_order_extends_and_filters(tmp_path, word_tok):
    prompts = [f"prompt {i} " + "w " * (i % 7) for i in range(40)] + ["", "   ", "prompt 0 "]
    p = _jsonl(tmp_path, prompts)
    cfg = PromptConfig(source="jsonl", path=str(p), seed=3, max_prompt_tokens=8, chat_template=False)
    t10, stats = build_prompt_table(cfg, word_tok, 10, context_length=100, max_new_tokens=10)
    t20, _ = build_prompt_table(cfg, word_tok, 20, context_length=100, max_new_tokens=10)
    assert list(t20.prompt_id[:10]) == list(t10.prompt_id)  # raising N extends, never reorders
    assert (t20.n_prompt_tokens <= 8).all()
    assert stats["records"] == 41  # the two empty prompts are dropped
    assert stats["after_dedup"] == 40  # "prompt 0 " duplicates q0
    other, _ = build_prompt_table(PromptConfig(**{**cfg.__dict__, "seed": 4}), word_tok, 10, 100, 10)
    assert list(other.prompt_id) != list(t10.prompt_id)


def test_all_empty_prompts(tmp_path, word_tok):
    p = _jsonl(tmp_path, ["", "  "])
    with pytest.raises(DataError, match="empty"):
        build_prompt_table(PromptConfig(source="jsonl", path=str(p), chat_template=False), word_tok, 1, 100, 10)


def test_prompt_longer_than_context(tmp_path, word_tok):
    p = _jsonl(tmp_path, ["w " * 50])
    cfg = PromptConfig(source="jsonl", path=str(p), chat_template=False, max_prompt_tokens=1000)
    with pytest.raises(DataError, match="exceeds the model's context"):
        build_prompt_table(cfg, word_tok, 1, context_length=60, max_new_tokens=20)


def test_not_enough_prompts(tmp_path, word_tok):
    p = _jsonl(tmp_path, ["a b", "c d"])
    with pytest.raises(DataError, match=r"only 2 of 2 prompts pass the filters \(0 empty, 0 duplicates, 0 longer than"):
        build_prompt_table(PromptConfig(source="jsonl", path=str(p), chat_template=False), word_tok, 5, 100, 10)


def test_chat_template_and_system_prompt(tmp_path, word_tok):
    p = _jsonl(tmp_path, ["hello there"])
    cfg = PromptConfig(source="jsonl", path=str(p), system_prompt="be brief")
    t, _ = build_prompt_table(cfg, word_tok, 1, 100, 10)
    assert t.iloc[0].rendered == "<system> be brief <user> hello there <assistant>"
    assert t.iloc[0].text == "hello there"


def test_packaged_sharegpt_recovers_whole_records():
    raw = load_raw(PromptConfig())
    assert len(raw) > 10_000
    assert raw["prompt"].str.len().min() > 0
    assert raw.attrs["sha256"]


def test_non_string_prompts_are_refused_naming_the_line(tmp_path):
    p = tmp_path / "n.jsonl"
    p.write_text('{"prompt": "fine"}\n\n{"prompt": 123}\n')
    with pytest.raises(DataError, match=r"n.jsonl:3: 'prompt' is a JSON int \(123\), not a string -- fix: .*\"prompt\": \"123\""):
        load_raw(PromptConfig(source="jsonl", path=str(p)))
    p.write_text('{"prompt": ["a", "b"]}\n')
    with pytest.raises(DataError, match=r"n.jsonl:1: 'prompt' is a JSON list"):
        load_raw(PromptConfig(source="jsonl", path=str(p)))
    a = tmp_path / "a.json"
    a.write_text(json.dumps([{"instruction": "ok"}, {"instruction": "x", "input": 4}], indent=1))
    with pytest.raises(DataError, match=r"a.json:5: 'input' is a JSON int"):  # the second record starts on line 5
        load_raw(PromptConfig(source="alpaca", path=str(a)))
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps([_conv(0, "q"), {"id": "c1", "conversations": [{"from": "human", "value": 7}]}]))
    with pytest.raises(DataError, match=r"sg.json:1: 'value' is a JSON int"):
        load_raw(PromptConfig(source="sharegpt-file", path=str(sg)))


def test_null_prompt_is_an_empty_prompt(tmp_path, word_tok):
    p = tmp_path / "n.jsonl"
    p.write_text('{"id": "a", "prompt": null}\n{"id": "b", "prompt": "two words"}\n')
    t, stats = build_prompt_table(PromptConfig(source="jsonl", path=str(p), chat_template=False), word_tok, 1, 100, 10)
    assert list(t.prompt_id) == ["b"] and stats["records"] == 1


def test_non_utf8_byte_is_refused_with_line_and_offset(tmp_path):
    p = tmp_path / "latin.jsonl"
    p.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"latin.jsonl:2: byte 0xe9 at byte offset 32 \(column 16\) is not UTF-8 -- fix: re-save"):
        load_raw(PromptConfig(source="jsonl", path=str(p)))
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"prompt": "caf\xc3\xa9"}\n')  # a UTF-8 BOM is fine
    assert load_raw(PromptConfig(source="jsonl", path=str(bom))).prompt.tolist() == ["caf\u00e9"]


def test_directory_as_prompt_file(tmp_path):
    with pytest.raises(DataError, match=r"is a directory -- fix: pass the path of a JSON or JSONL file"):
        load_raw(PromptConfig(source="jsonl", path=str(tmp_path)))


def test_json_array_malformed_or_truncated(tmp_path):
    closed = tmp_path / "bad.json"
    closed.write_text('[\n {"instruction": "a"},\n {"instruction": oops},\n {"instruction": "c"}\n]\n')
    with pytest.raises(DataError, match=r"bad.json:3 is not valid JSON"):  # a closed array: malformed, refused
        load_raw(PromptConfig(source="alpaca", path=str(closed)))
    cut = tmp_path / "cut.json"
    cut.write_text('[\n {"instruction": "a"},\n {"instruction": "b"},\n {"instruction": "c')
    assert load_raw(PromptConfig(source="alpaca", path=str(cut))).prompt.tolist() == ["a", "b"]  # truncated: whole records


def test_word_tokenizer_is_stable_across_processes(word_tok):
    """Fixture ids must not depend on PYTHONHASHSEED (str hash() is salted per process)."""
    import os
    import subprocess
    import sys

    here = Path(__file__).resolve().parents[1]  # tests/, where model_testing.py lives
    code = "from model_testing import WordTokenizer; print(WordTokenizer()('hello big world')['input_ids'])"
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(here)}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-500:]
        outs.add(done.stdout.strip())
    assert outs == {str(word_tok("hello big world")["input_ids"])}
