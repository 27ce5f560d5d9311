"""Reading and writing draft heads in the released layout, and checking one against a target.

A head directory is what released EAGLE-3 heads ship, loadable by vLLM / SGLang as it is::

    HEAD/
      config.json            LlamaForCausalLM-style, with draft_vocab_size (lenpred.draft.config)
      model.safetensors      or pytorch_model.bin (torch.save of the state dict)
      meta.json              lenpred's own (kind "draft", card_scope "model"): the target's
                             fingerprint, layers and vocabulary, the training card; optional on read

Loading is strict: every released key must be there with its shape (``d2t`` int64, ``t2d`` bool),
no other key may be, and ``torch.load`` runs with ``weights_only=True``. One exception: SpecForge's
HF export also carries the target's ``embed_tokens.weight``; it is checked for shape and dropped,
since lenpred always uses the target's own embeddings.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lenpred.draft.config import DraftConfig
from lenpred.draft.model import Eagle3Draft, expected_state_shapes
from lenpred.draft.vocab import check_vocab_maps
from lenpred.errors import CardMismatchError, ConfigError, ModelError

__all__ = ["DraftHead", "check_against_target", "convert_draft", "load_draft", "read_state_dict", "save_draft",
           "target_config", "WEIGHT_FILES"]

KIND = "draft"
SCHEMA_VERSION = 1
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_EMBED_KEY = "embed_tokens.weight"


@dataclass
class DraftHead:
    model: Eagle3Draft
    config: DraftConfig
    path: Path
    weights_file: str
    meta: dict[str, Any] | None  # lenpred's meta.json, None for a head from elsewhere
    dropped: list[str]  # keys present in the file but not used (SpecForge's embed_tokens.weight)


def read_state_dict(path: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The tensors of a head directory (safetensors preferred when both files exist)."""
    p = Path(path)
    for name in WEIGHT_FILES:
        f = p / name
        if not f.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                return dict(load_file(str(f))), name
            sd = torch.load(str(f), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - unreadable files raise many types
            raise ModelError(f"{f} is not a readable {name} ({type(e).__name__}: {str(e).splitlines()[0][:120]})",
                             "re-download or re-create the head") from None
        if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            raise ModelError(f"{f} does not hold a flat state dict of tensors", "save the head's state_dict()")
        return dict(sd), name
    raise ModelError(f"{p} has no {' or '.join(WEIGHT_FILES)}", "pass an EAGLE-3 head directory")


def _check_keys(sd: dict[str, torch.Tensor], cfg: DraftConfig, where: str) -> list[str]:
    want = expected_state_shapes(cfg)
    dropped = []
    if _EMBED_KEY in sd:  # SpecForge exports include the (frozen) target embeddings
        shape = tuple(sd[_EMBED_KEY].shape)
        if shape != (cfg.vocab_size, cfg.hidden_size):
            raise ModelError(f"{where}: {_EMBED_KEY} has shape {shape}, config says {(cfg.vocab_size, cfg.hidden_size)}",
                             "config.json and the weights belong to different heads")
        dropped.append(_EMBED_KEY)
    have = set(sd) - set(dropped)
    missing = sorted(set(want) - have)
    extra = sorted(have - set(want))
    if missing:
        raise ModelError(f"{where} is missing key(s) {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}",
                         "pass a complete EAGLE-3 head (fc, midlayer.*, norm, lm_head, d2t, t2d)")
    if extra:
        raise ModelError(f"{where} has unexpected key(s) {', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}",
                         "pass an EAGLE-3 head in the released layout (one midlayer, no target weights)")
    for k, (shape, dtype) in want.items():
        got = tuple(sd[k].shape)
        if got != shape:
            raise ModelError(f"{where}: {k} has shape {got}, its config.json implies {shape}",
                             "config.json and the weights belong to different heads")
        if dtype is not None and sd[k].dtype != dtype:
            raise ModelError(f"{where}: {k} is {sd[k].dtype}, the layout stores {dtype}",
                             "the weights file is damaged or of another layout: re-download or re-convert the head")
        if dtype is None and not sd[k].is_floating_point():
            raise ModelError(f"{where}: {k} is {sd[k].dtype}, expected a floating-point weight",
                             "the weights file is damaged or quantized: pass an unquantized EAGLE-3 head")
    return dropped


def load_draft(path: str | Path, *, dtype: torch.dtype = torch.float32) -> DraftHead:
    """Load a head directory strictly (config.json + weights [+ meta.json]); weights cast to ``dtype``."""
    p = Path(path)
    if not p.is_dir():
        raise ModelError(f"draft head {p} does not exist" if not p.exists() else f"draft head {p} is not a directory",
                         "pass a head directory (config.json + model.safetensors or pytorch_model.bin)")
    cfg = DraftConfig.load(p / "config.json")
    sd, name = read_state_dict(p)
    dropped = _check_keys(sd, cfg, f"{p / name}")
    check_vocab_maps(sd["d2t"], sd["t2d"], cfg.vocab_size, what=f"draft head {p}")
    from lenpred.io.artifacts import check_finite

    check_finite(sd, what=f"draft head {p / name}")
    sd = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in sd.items() if k not in dropped}
    model = Eagle3Draft(cfg).to(dtype)
    model.load_state_dict(sd, strict=True)
    model.eval()
    meta = None
    if (p / "meta.json").is_file():
        from lenpred.io.artifacts import load_artifact

        meta = load_artifact(p, kind=KIND, schema_versions=(SCHEMA_VERSION,), what="draft head").meta
    return DraftHead(model=model, config=cfg, path=p, weights_file=name, meta=meta, dropped=dropped)


def state_dict_for_save(model: Eagle3Draft, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The released keys, weights in ``dtype`` (float16 in the release), index buffers as they are."""
    sd = model.state_dict()
    return {k: (v.detach().to(dtype) if v.is_floating_point() else v.detach()).contiguous().cpu() for k, v in sd.items()}


def save_draft(model: Eagle3Draft, out: str | Path, *, fmt: str = "safetensors", dtype: str = "float16",
               card: dict[str, Any] | None = None, config: Any = None, meta: dict[str, Any] | None = None) -> Path:
    """Write a head directory atomically: config.json, the weights, lenpred's meta.json."""
    from lenpred.io.artifacts import ArtifactHeader, write_artifact

    if fmt not in ("safetensors", "bin"):
        raise ModelError(f"unknown weight format {fmt!r}", "use safetensors or bin")
    if dtype not in ("float16", "bfloat16", "float32"):
        raise ModelError(f"unknown dtype {dtype!r}", "use float16, bfloat16 or float32")
    sd = state_dict_for_save(model, getattr(torch, dtype))
    cfg = model.config
    cfg_json = DraftConfig(**{**cfg.as_dict(), "torch_dtype": dtype}).to_json()
    if fmt == "safetensors":
        from safetensors.torch import save

        name, blob = "model.safetensors", save(sd, metadata={"format": "pt"})
    else:
        buf = io.BytesIO()
        torch.save(sd, buf)
        name, blob = "pytorch_model.bin", buf.getvalue()
    m = {"weights": name, **(meta or {})}
    write_artifact(out, ArtifactHeader(kind=KIND, schema_version=SCHEMA_VERSION, config=config, card=card,
                                       card_scope="model", meta=m),
                   json_files={"config.json": cfg_json}, files={name: blob})
    return Path(out)


def target_summary(model_config: Any, fingerprint: str | None, model_id: str | None = None) -> dict[str, Any]:
    """What a head records about its target (meta.json ``target``)."""
    c = model_config
    return {
        "id": model_id,
        "fingerprint": fingerprint,
        "num_hidden_layers": int(c.num_hidden_layers),
        "hidden_size": int(c.hidden_size),
        "vocab_size": int(c.vocab_size),
    }


def check_against_target(head: DraftHead, target_config: Any, *, fingerprint: str | None = None,
                         vocab_size: int | None = None) -> tuple[int, int, int]:
    """Refuse a head made for another target, naming what differs; returns the layers to capture."""
    cfg = head.config
    what = f"draft head {head.path}"
    t_hidden = int(target_config.hidden_size)
    t_layers = int(target_config.num_hidden_layers)
    t_vocab = int(vocab_size if vocab_size is not None else target_config.vocab_size)
    rec = (head.meta or {}).get("target") or {}
    if rec.get("fingerprint") and fingerprint and rec["fingerprint"] != fingerprint:
        raise CardMismatchError(
            f"{what} was trained for target {rec.get('id') or '?'} ({rec['fingerprint'][:19]}...), "
            f"not this one ({fingerprint[:19]}...)",
            "pass the --model the head was made for, or train a head for this target",
        )
    if cfg.target_hidden_size != t_hidden:
        raise ModelError(f"{what}: hidden size mismatch: its fc reads 3 x {cfg.target_hidden_size}, the target's "
                         f"hidden size is {t_hidden}", "use a head made for this target")
    if cfg.hidden_size != t_hidden:
        raise ModelError(f"{what}: hidden size mismatch: the head is {cfg.hidden_size} wide but reads the target's "
                         f"{t_hidden}-wide embeddings", "use a head made for this target")
    if cfg.vocab_size != t_vocab:
        raise ModelError(f"{what}: vocabulary mismatch: made for {cfg.vocab_size} target ids, the target has {t_vocab}",
                         "use a head made for this target's tokenizer")
    if rec.get("num_hidden_layers") is not None and int(rec["num_hidden_layers"]) != t_layers:
        raise ModelError(f"{what}: layer mismatch: made for a target with {rec['num_hidden_layers']} layers, this "
                         f"one has {t_layers}", "use a head made for this target")
    layers = cfg.resolved_layers(t_layers)
    if not all(0 <= j < t_layers for j in layers) or len(set(layers)) != 3:
        raise ModelError(f"{what}: layer mismatch: it reads target layers {list(layers)}, the target has {t_layers}",
                         "use a head made for this target")
    check_vocab_maps(head.model.d2t, head.model.t2d, t_vocab, what=what)
    return layers


def read_config_json(path: Path) -> dict[str, Any]:
    return json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))


def target_config(name: str) -> tuple[Any, Any]:
    """(model spec, transformers config) of a target by id or path, without loading its weights."""
    from transformers import AutoConfig

    from lenpred.models.loading import hf_folder

    spec, folder = hf_folder(name)
    return spec, AutoConfig.from_pretrained(folder)


def convert_draft(src: str | Path, out: str | Path, *, model: str | None = None, fmt: str = "safetensors",
                  dtype: str = "float16") -> Path:
    """Re-save the head ``src`` in the released layout (``fmt``, ``dtype``) with lenpred's meta.json.
    With ``model`` the head is checked against that target, which meta.json then names (and
    config.json its layers); otherwise the source's own target record is kept."""
    out = Path(out)
    if out.resolve() == Path(src).resolve():
        raise ConfigError("--out is the source head", "write the converted head to a new directory")
    head = load_draft(src)
    meta: dict[str, Any] = {"converted_from": str(src)}
    m = head.model
    if model:
        spec, tcfg = target_config(model)
        layers = check_against_target(head, tcfg, fingerprint=spec.fingerprint)
        meta["target"] = target_summary(tcfg, spec.fingerprint, model)
        meta["layers"] = list(layers)
        if head.config.layers is None:  # record the layers explicitly in config.json too
            m.config = DraftConfig(**{**head.config.as_dict(), "layers": layers})
    elif head.meta and head.meta.get("target"):
        meta["target"] = head.meta["target"]
    save_draft(m, out, fmt=fmt, dtype=dtype, meta=meta)
    return out
