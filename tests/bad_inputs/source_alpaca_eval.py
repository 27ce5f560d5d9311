"""Bad inputs of the ``alpaca-eval`` prompt source (rows for tests/test_bad_input.py): a file that is
not the alpaca-eval sdist, a cut-off download, a file of another kind. The sdist that is not
downloaded at all is a unit test (tests/data/test_source_alpaca_eval.py), since the folders
it is looked for in are this machine's."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from bad_input_harness import BadInput


def _tar(tmp: Path, name: str = "alpaca_eval-0.6.6.tar.gz") -> Path:
    """A source tarball of some other package: code, no example/outputs.json."""
    p = tmp / name
    with tarfile.open(p, "w:gz") as tf:
        data = b"from setuptools import setup\n"
        info = tarfile.TarInfo("alpaca_eval-0.6.6/setup.py")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return p


def _no_member(tmp: Path) -> dict[str, Path]:
    return {"prompts": _tar(tmp)}


def _cut_download(tmp: Path) -> dict[str, Path]:
    whole = _tar(tmp, "whole.tar.gz")
    cut = tmp / "alpaca_eval-0.6.6.tar.gz"
    cut.write_bytes(whole.read_bytes()[:40])
    whole.unlink()
    return {"prompts": cut}


def _text_file(tmp: Path) -> dict[str, Path]:
    p = tmp / "notes.txt"
    p.write_text("my notes\n")
    return {"prompts": p}


def _collect() -> list[str]:
    return ["collect", "--run", "{tmp}/run", "--source", "alpaca-eval", "--prompts-file", "{prompts}", "--prompts", "1",
            "--samples", "1", "--max-new-tokens", "8", "--no-progress"]


CASES: list[BadInput] = [
    BadInput("collect-alpaca-eval-not-the-sdist", _collect(), _no_member,
             expect="holds no example/outputs.json: it is not the alpaca-eval source distribution -- fix: download"),
    BadInput("collect-alpaca-eval-cut-download", _collect(), _cut_download,
             expect="is not a readable .tar.gz"),
    BadInput("collect-alpaca-eval-wrong-file-kind", _collect(), _text_file,
             expect="notes.txt is neither the alpaca-eval sdist (.tar.gz) nor an AlpacaEval JSON file"),
]
