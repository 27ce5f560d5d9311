"""Bad inputs of collect, the run directory, prompt files and models (rows for tests/test_bad_input.py).

Each row: exit code 1 (2 for argparse's own errors), one line naming the problem and the fix, and
nothing written or changed under the test's directory. The one case that must write (a resuming
``collect`` setting a corrupt shard aside) is a normal test in tests/collect/test_collect_runner.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from bad_input_harness import BadInput
from lenpred.data.rundir import RunDir

CARD = {
    "model": {"id": "m", "fingerprint": "sha256:0"},
    "prompts": {"source": "synthetic"},
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 8, "seed": 0},
    "engine": {"name": "synthetic", "version": "0"},
}


def _run(tmp: Path) -> Path:
    """A small valid run: 3 prompts x 4 samples in 3 shards."""
    import pandas as pd

    rd = RunDir.create(tmp / "run", CARD)
    rd.write_prompts(pd.DataFrame({"prompt_id": ["a", "b", "c"], "idx": [0, 1, 2], "text": ["x"] * 3, "n_prompt_tokens": [1] * 3}))
    for pid in ("a", "b", "c"):
        rd.append_samples(
            [{"prompt_id": pid, "sample_idx": k, "n_tokens": 3 + k, "stop_reason": "eos", "text": "t", "token_ids": [1] * (3 + k)} for k in range(4)]
        )
    return rd.path


def _truncated_shard(tmp: Path) -> dict[str, Path]:
    run = _run(tmp)
    shard = run / "samples.parquet" / "part-00001.parquet"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    return {"run": run}


def _foreign_file_as_shard(tmp: Path) -> dict[str, Path]:
    run = _run(tmp)
    (run / "samples.parquet" / "part-00003.parquet").write_text("prompt_id,n_tokens\na,3\n")
    return {"run": run}


def _corrupt_prompt_table(tmp: Path) -> dict[str, Path]:
    run = _run(tmp)
    (run / "prompts.parquet").write_bytes(b"PAR1 not really")
    return {"run": run}


def _prompts(tmp: Path, lines: list[str] | None = None, name: str = "prompts.jsonl") -> Path:
    p = tmp / name
    rows = lines if lines is not None else [json.dumps({"id": f"q{i}", "prompt": t}) for i, t in enumerate(["Name a color.", "Name a fruit."])]
    p.write_text("".join(r + "\n" for r in rows))
    return p


def _ok(tmp: Path) -> dict[str, Path]:
    return {"prompts": _prompts(tmp)}


def _run_is_a_file(tmp: Path) -> dict[str, Path]:
    f = tmp / "notes.txt"
    f.write_text("my notes\n")
    return {"prompts": _prompts(tmp), "target": f}


def _run_is_someones_dir(tmp: Path) -> dict[str, Path]:
    d = tmp / "mine"
    d.mkdir()
    (d / "thesis.tex").write_text("\\documentclass{article}\n")
    return {"prompts": _prompts(tmp), "target": d}


def _run_of_another_card(tmp: Path) -> dict[str, Path]:
    return {"prompts": _prompts(tmp), "target": _run(tmp)}


def _not_a_gguf(tmp: Path) -> dict[str, Path]:
    f = tmp / "model.gguf"
    f.write_text("this is not a model\n")
    g = tmp / "weights.bin"
    g.write_bytes(b"\x00" * 64)
    return {"prompts": _prompts(tmp), "gguf": f, "bin": g}


def _folder_without_config(tmp: Path) -> dict[str, Path]:
    d = tmp / "model"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"\x00" * 16)
    return {"prompts": _prompts(tmp), "folder": d}


def _number_prompt(tmp: Path) -> dict[str, Path]:
    return {"prompts": _prompts(tmp, ['{"id": "a", "prompt": "Name a color."}', '{"id": "b", "prompt": 123}'])}


def _not_utf8(tmp: Path) -> dict[str, Path]:
    p = tmp / "latin1.jsonl"
    p.write_bytes(b'{"prompt": "Name a color."}\n{"prompt": "caf\xe9 au lait?"}\n')
    return {"prompts": p}


def _prompts_dir(tmp: Path) -> dict[str, Path]:
    d = tmp / "prompts"
    d.mkdir()
    _prompts(d)
    return {"prompts": d}


def _bad_json_line(tmp: Path) -> dict[str, Path]:
    return {"prompts": _prompts(tmp, ['{"prompt": "ok"}', "not json"])}


def _no_prompt_field(tmp: Path) -> dict[str, Path]:
    return {"prompts": _prompts(tmp, ['{"prompt": "ok"}', '{"text": "hello"}'])}


def _empty_file(tmp: Path) -> dict[str, Path]:
    p = tmp / "empty.jsonl"
    p.write_text("")
    return {"prompts": p}


def _alpaca_no_instruction(tmp: Path) -> dict[str, Path]:
    p = tmp / "alpaca.json"
    p.write_text(json.dumps([{"instruction": "Count to three."}, {"input": "orphan"}], indent=2))
    return {"prompts": p}


def _collect(*extra: str, run: str = "{tmp}/run", prompts: str = "{prompts}") -> list[str]:
    """A short collect command line on a local JSONL file (the real embedded model's tokenizer)."""
    return ["collect", "--run", run, "--source", "jsonl", "--prompts-file", prompts, "--prompts", "1", "--samples", "1",
            "--max-new-tokens", "8", "--no-progress", *extra]


CASES: list[BadInput] = [
    # ---- damaged run directories: every reader names the file
    BadInput("info-truncated-shard", ["info", "{run}"], _truncated_shard, expect="part-00001.parquet is not a readable Parquet file"),
    BadInput("info-truncated-shard-json", ["info", "{run}", "--json"], _truncated_shard,
             expect="(no Parquet footer: truncated, or not a Parquet file) -- fix: rerun `lenpred collect` with the run's arguments: it sets the shard aside"),
    BadInput("bound-truncated-shard", ["bound", "{run}", "--out", "{tmp}/out", "--no-plots"], _truncated_shard,
             expect="part-00001.parquet is not a readable Parquet file"),
    BadInput("info-shard-not-parquet", ["info", "{run}"], _foreign_file_as_shard, expect="part-00003.parquet is not a readable Parquet file"),
    BadInput("bound-shard-not-parquet", ["bound", "{run}", "--out", "{tmp}/out", "--no-plots"], _foreign_file_as_shard,
             expect="part-00003.parquet is not a readable Parquet file"),
    BadInput("info-prompt-table-corrupt", ["info", "{run}"], _corrupt_prompt_table, expect="prompts.parquet is not a readable Parquet file"),
    # ---- where the run goes
    BadInput("collect-run-is-a-file", _collect(run="{target}"), _run_is_a_file, expect="notes.txt is a file, not a run directory"),
    BadInput("collect-run-is-a-foreign-dir", _collect(run="{target}"), _run_is_someones_dir,
             expect="is a non-empty directory that is not a lenpred run (no card.json)"),
    BadInput("collect-run-of-another-card", _collect(run="{target}"), _run_of_another_card, expect="holds a run made under another card"),
    # ---- models
    BadInput("collect-model-not-gguf", _collect("--model", "{gguf}"), _not_a_gguf, expect="model.gguf is not a GGUF file"),
    BadInput("collect-model-bin-not-gguf", _collect("--model", "{bin}"), _not_a_gguf, expect="weights.bin is not a GGUF file"),
    BadInput("model-not-gguf", ["model", "{gguf}"], _not_a_gguf, expect="model.gguf is not a GGUF file"),
    BadInput("model-folder-without-config", ["model", "{folder}"], _folder_without_config, expect="has no config.json"),
    BadInput("collect-unknown-model", _collect("--model", "no-such-model"), _ok, expect="unknown model 'no-such-model'"),
    BadInput("collect-missing-model-path", _collect("--model", "{tmp}/nowhere"), _ok, expect="unknown model"),
    # ---- prompt files: lines count from 1 everywhere
    BadInput("collect-prompt-is-a-number", _collect("--prompts", "2"), _number_prompt,
             expect="prompts.jsonl:2: 'prompt' is a JSON int (123), not a string"),
    BadInput("collect-prompt-not-utf8", _collect(), _not_utf8, expect="latin1.jsonl:2: byte 0xe9 at byte offset 43 (column 16) is not UTF-8"),
    BadInput("collect-prompts-file-is-a-dir", _collect(), _prompts_dir, expect="is a directory -- fix: pass the path of a JSON or JSONL file"),
    BadInput("collect-prompts-file-missing", _collect(prompts="{tmp}/missing.jsonl"), None, expect="missing.jsonl does not exist"),
    BadInput("collect-jsonl-bad-line", _collect(), _bad_json_line, expect="prompts.jsonl:2 is not valid JSON"),
    BadInput("collect-jsonl-no-prompt-field", _collect(), _no_prompt_field, expect="prompts.jsonl:2: the record has no 'prompt' field"),
    BadInput("collect-alpaca-no-instruction", [*_collect(), "--source", "alpaca"], _alpaca_no_instruction,
             expect="alpaca.json:5: the record has no 'instruction' field"),
    BadInput("collect-empty-prompt-file", _collect(), _empty_file, expect="empty.jsonl is empty"),
    BadInput("collect-prompts-file-needed", ["collect", "--run", "{tmp}/run", "--source", "jsonl", "--no-progress"], None,
             expect="prompt source 'jsonl' needs a file"),
    BadInput("collect-too-few-prompts", _collect("--prompts", "5"), _ok, expect="only 2 of 2 prompts pass the filters"),
    BadInput("collect-prompt-longer-than-context", _collect("--max-new-tokens", "9000", "--max-prompt-tokens", "4096"), _ok,
             expect="exceeds the model's context"),
    # ---- names and values
    BadInput("collect-unknown-engine", _collect("--engine", "vllm"), _ok, expect="unknown engine 'vllm' -- fix: use one of: hf, llamacpp, openai"),
    BadInput("collect-unknown-source", [*_collect(), "--source", "nope"], _ok, expect="unknown prompt source 'nope'"),
    BadInput("collect-temperature-zero", _collect("--temperature", "0"), _ok, expect="sampling.temperature: must be > 0 for sampling"),
    BadInput("collect-top-p-above-one", _collect("--top-p", "1.5"), _ok, expect="sampling.top_p: must be in (0, 1]"),
    BadInput("collect-zero-prompts", _collect("--prompts", "0"), _ok, expect="n_prompts: must be positive, got 0 -- fix: pass --prompts 1 or more"),
    BadInput("collect-max-prompt-tokens-zero", _collect("--max-prompt-tokens", "0"), _ok, expect="prompts.max_prompt_tokens: must be positive"),
    BadInput("collect-unknown-dtype", _collect("--engine", "hf", "--dtype", "int3"), _ok, expect="invalid choice: 'int3'"),
    BadInput("collect-option-of-another-engine", _collect("--engine", "hf", "--n-parallel", "4"), _ok,
             expect="--n-parallel is an option of the llamacpp engine, and this run uses --engine hf"),
    BadInput("collect-openai-without-url", _collect("--engine", "openai"), _ok, expect="the openai engine needs a server URL"),
    BadInput("collect-unreachable-server", _collect("--engine", "openai", "--base-url", "http://127.0.0.1:9/v1"), _ok,
             expect="cannot reach the OpenAI-compatible server"),
]

CASES += [
    BadInput("collect-base-url-not-a-url", _collect("--engine", "openai", "--base-url", "not-a-url"), _ok,
             expect="engine_options.base_url: 'not-a-url' is not an http(s) URL"),
]
