"""AlpacaEval's 805 instructions, as shipped in the source distribution of the ``alpaca-eval`` PyPI package.

A second prompt source beside ShareGPT, for transfer benchmarks (a head trained on ShareGPT, benched
on another prompt set under the same model and sampling card). AlpacaEval mixes five instruction
sets: self-instruct (252), OpenAssistant (188), Koala (156), Anthropic helpful-base (129) and
Vicuna (80); most are real user requests.

The package's *wheel* holds no prompts; its *sdist* ``alpaca_eval-0.6.6.tar.gz`` carries them in
``example/outputs.json`` (a JSON array of ``{instruction, output, generator, dataset, datasplit}``,
the same records as the hub's ``alpaca_eval.json``). ``make install`` downloads that sdist into
``.venv/share/lenpred`` with ``pip download``; it is read straight from the tarball, nothing is
extracted. Licences: the package is Apache-2.0; the AlpacaEval data are CC BY-NC 4.0 (research and
other non-commercial use, with attribution).

Each record becomes ``id`` (``<subset>-<position>``, e.g. ``koala-042``; the position is the record's
0-based index in the file, so ids are stable for the pinned file), ``prompt`` (the instruction),
``answer`` (the example output shipped with it, the reference answer), ``subset``.
``attrs['sha256']`` is the hash of the JSON file's bytes (the same whether it is read from the
tarball or from an extracted copy).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pandas as pd

from lenpred.errors import DataError
from lenpred.io.paths import home

VERSION = "0.6.6"
SDIST = f"alpaca_eval-{VERSION}.tar.gz"
MEMBER = "example/outputs.json"  # inside the sdist's top folder
SHA256 = "4337273753e16055c9c9a2c3c917a43de8b7a50d538f2c0a6200d21ff711eed5"  # of MEMBER in 0.6.6 (805 records)


def search_dirs() -> list[Path]:
    """Where the sdist is looked for: the venv's share folder (``make install``), then the cache."""
    return [Path(sys.prefix) / "share" / "lenpred", home() / "datasets"]


def download_command(dest: Path | None = None) -> str:
    dest = dest or search_dirs()[0]
    return f'pip download --no-deps --no-binary :all: "alpaca-eval=={VERSION}" -d {dest}'


def find_sdist() -> Path:
    for d in search_dirs():
        if (d / SDIST).is_file():
            return d / SDIST
    where = " or ".join(str(d) for d in search_dirs())
    raise DataError(
        f"the AlpacaEval prompts are not downloaded: no {SDIST} in {where}",
        f"run `make install`, or `{download_command()}`, or pass --prompts-file PATH to the sdist or its {MEMBER}",
    )


def _read_member(tar_path: Path) -> bytes:
    """The bytes of ``<top>/example/outputs.json`` inside the sdist tarball."""
    try:
        with tarfile.open(tar_path, "r:*") as tf:
            names = [m for m in tf.getmembers() if m.isfile() and (m.name == MEMBER or m.name.endswith("/" + MEMBER))]
            if not names:
                raise DataError(
                    f"{tar_path} holds no {MEMBER}: it is not the alpaca-eval source distribution",
                    f"download the one that ships the prompts: {download_command(tar_path.parent)}",
                )
            f = tf.extractfile(min(names, key=lambda m: len(m.name)))  # the top folder's, not a nested copy
            if f is None:  # pragma: no cover - a regular file member always has a file object
                raise tarfile.TarError(f"{MEMBER} cannot be read")
            return f.read()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataError(
            f"{tar_path} is not a readable .tar.gz ({type(e).__name__}: {e})",
            f"delete it and download it again: {download_command(tar_path.parent)}",
        ) from None


def _records(data: bytes, where: str) -> list[Any]:
    try:
        recs = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise DataError(f"{where}: byte offset {e.start} is not UTF-8", "use the file as the package ships it") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{where}:{e.lineno} is not valid JSON ({e.msg})", "use the file as the package ships it") from None
    if not isinstance(recs, list):
        raise DataError(f"{where} is a JSON {type(recs).__name__}, not an array of records", "pass AlpacaEval's outputs.json")
    return recs


def _text(r: dict[str, Any], key: str, where: str, i: int, required: bool = False) -> str:
    v = r.get(key)
    if v is None and not required:
        return ""
    if not isinstance(v, str):
        what = "is missing" if v is None else f"is a JSON {type(v).__name__}, not a string"
        raise DataError(
            f"{where}: record {i} (0-based) {key!r} {what}",
            'AlpacaEval records look like {"instruction": "...", "output": "...", "dataset": "koala"}',
        )
    return v


def parse(data: bytes, where: str) -> pd.DataFrame:
    """AlpacaEval records (JSON array bytes) -> the raw frame (id, prompt, answer, subset)."""
    rows = []
    for i, r in enumerate(_records(data, where)):
        if not isinstance(r, dict):
            raise DataError(f"{where}: record {i} (0-based) is not an object", "pass AlpacaEval's outputs.json")
        prompt = _text(r, "instruction", where, i, required=True)
        subset = _text(r, "dataset", where, i) or "alpaca_eval"
        rows.append({"id": f"{subset}-{i:03d}", "prompt": prompt, "answer": _text(r, "output", where, i), "subset": subset})
    if not rows:
        raise DataError(f"{where} holds no records", "pass AlpacaEval's outputs.json")
    df = pd.DataFrame(rows, columns=["id", "prompt", "answer", "subset"])
    df.attrs["sha256"] = hashlib.sha256(data).hexdigest()
    return df


def load_alpaca_eval(path: Path | None = None) -> pd.DataFrame:
    """The AlpacaEval instructions: from ``path`` (the sdist ``.tar.gz`` or an AlpacaEval JSON file,
    e.g. an extracted ``outputs.json``), else from the downloaded sdist (:func:`find_sdist`)."""
    p = Path(path) if path is not None else find_sdist()
    if p.is_dir():
        raise DataError(f"{p} is a directory", f"pass the path of {SDIST} or of its {MEMBER}")
    if not p.is_file():
        raise DataError(f"{p} does not exist", f"check the path, or download the sdist: {download_command()}")
    if p.name.endswith((".tar.gz", ".tgz", ".tar")):
        return parse(_read_member(p), f"{p}:{MEMBER}")
    if p.suffix == ".json":
        return parse(p.read_bytes(), str(p))
    raise DataError(
        f"{p} is neither the alpaca-eval sdist (.tar.gz) nor an AlpacaEval JSON file (.json)",
        f"pass {SDIST} or its {MEMBER}",
    )
