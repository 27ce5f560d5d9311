"""The teacher-forced target states of a run's responses, cached on local disk in shards.

Teacher forcing (prompt + response through the target, no sampling) is the expensive part of
draft training on a CPU, and OUTLETS needs the same states, so they are computed once and kept::

    CACHE/                                   $LENPRED_HOME/draft-states/<card>-<fp>-L<a>-<b>-<c>-k<K>
      manifest.json                          target fingerprint, layers, labels, top-k, dtype, run card hash
      shard-00000.safetensors                aux (R, 3d) fp16 | tokens (R,) int32
                                             topk_ids (Rr, K) int32 | topk_logp (Rr, K) fp16
      shard-00000.json                       index: prompts (row, n) and samples (row, n, topk_row)

Per prompt, the rows of its prompt tokens are stored once; per sample, the rows of its response
tokens. ``aux`` is the concatenation of the target's hidden states at the head's three layers (the
``fc`` input) at each token; ``topk_*`` are, at each response token ``s``, the ``K`` largest
log-probabilities of the target's next-token distribution (temperature 1, no penalties) over the
whole vocabulary and their ids -- the soft labels, restricted to the draft vocabulary at training
time (so one cache serves any draft vocabulary).

**Labels.** The manifest's ``labels`` says which: ``soft`` (the default; a manifest without the field
is one) holds the top-K above, from a full forward pass with the LM head and a log-softmax over the
vocabulary; ``hard`` holds no logits at all (no ``topk_*`` tensors, ``topk`` 0 in the manifest, the
directory named ``...-hard`` instead of ``...-k<K>``): draft training then learns the run's own sampled
next tokens, which ``tokens`` already holds, and the states come from the target's states-only pass
(:meth:`lenpred.draft.target.Target.states_only`: no LM head, no layers above the highest captured
one, a prompt's samples batched on its cache). A cache keeps the kind it was made with: extending it
with the other kind is refused.

**Sizes.** fp16 throughout (hidden states of SmolLM2-135M reach |x| ~ 620, far inside fp16's
range; fp16's 11-bit mantissa is finer than bf16's 8): per token 3 x 576 x 2 = 3456 bytes of states
+ K x 6 bytes of labels (384 at K = 64), about 3.8 kB; ~1 M response tokens are ~3.8 GB (prompt
rows come once per prompt, not per sample). With K = 64 the labels keep 95% of the target's
probability mass on average on the reference run (5th percentile 80%, measured on 15k response
tokens); the rest is dropped and the kept entries renormalised over the draft vocabulary.

**Resumable.** A shard is two files written to temporary names and renamed, the index last: a
shard whose index exists is complete. A run that grows (more samples per prompt) gets new shards
for the new samples only.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lenpred.errors import DataError
from lenpred.io.fileio import atomic_write_json

# one prompt of a shard: (prompt_id, n_prompt, prompt aux, prompt ids,
#   [(sample_idx, n, aux, ids, topk_ids, topk_logp, stop_reason)])
_Prompt = tuple[str, int, np.ndarray, np.ndarray, list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]]]

__all__ = ["LABELS", "SampleStates", "StateCache", "compute_dtype_of", "default_cache_dir", "labels_of",
           "refuse_other_labels"]

SCHEMA = "lenpred.draft-states/1"
LABELS = ("soft", "hard")  # soft: the target's top-K log-probabilities; hard: the run's sampled tokens only
_TOPK = ("topk_ids", "topk_logp")


def default_cache_dir(card_hash: str, fingerprint: str, layers: tuple[int, ...], topk: int,
                      labels: str = "soft", compute_dtype: str = "float32") -> Path:
    from lenpred.io.paths import home

    fp = fingerprint.split(":")[-1][:12]
    kind = "hard" if labels == "hard" else f"k{topk}"
    if compute_dtype != "float32":  # states of another arithmetic: never the same directory
        kind += "-bf16" if compute_dtype == "bfloat16" else f"-{compute_dtype}"
    return home() / "draft-states" / f"{card_hash}-{fp}-L{'-'.join(map(str, layers))}-{kind}"


def labels_of(manifest: dict[str, Any]) -> str:
    """A cache's label kind: ``soft`` for a manifest written before hard labels existed."""
    return str(manifest.get("labels", "soft"))


def compute_dtype_of(manifest: dict[str, Any]) -> str:
    """The arithmetic a cache's states were computed in: ``float32`` for a manifest written before the
    hard pass could run in bfloat16."""
    return str(manifest.get("compute_dtype", "float32"))


@dataclass
class SampleStates:
    """One sample's teacher-forced states: tokens x_0..x_{N-1} (prompt + response)."""

    prompt_id: str
    sample_idx: int
    n_prompt: int
    tokens: np.ndarray  # (N,) int32
    aux: np.ndarray  # (N, 3d) float16: target states at x_t
    topk_ids: np.ndarray  # (N - n_prompt, K) int32: at s = n_prompt..N-1, top-K ids of the next token (K = 0: hard)
    topk_logp: np.ndarray  # (N - n_prompt, K) float16: their log-probabilities
    stop_reason: str


class StateCache:
    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = Path(root)
        self.manifest = manifest
        self._index: dict[tuple[str, int], tuple[str, dict[str, Any], dict[str, Any]]] | None = None
        self._shards: dict[str, dict[str, Any]] = {}  # checked shard indexes by name (a written shard never changes)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open_or_create(cls, root: str | os.PathLike[str], manifest: dict[str, Any]) -> StateCache:
        """Open a cache made under the same manifest, or start one (the directory is made lazily)."""
        root = Path(root)
        m = {"schema": SCHEMA, **manifest}
        m["labels"] = labels_of(m)
        if m["labels"] not in LABELS:
            raise DataError(f"state cache labels {m['labels']!r} is not one of {', '.join(LABELS)}",
                            "pass --labels soft or --labels hard")
        if m["labels"] == "hard":
            m["topk"] = 0  # no logits are kept
        m["compute_dtype"] = compute_dtype_of(m)
        if m["labels"] == "soft" and m["compute_dtype"] != "float32":
            raise DataError(f"soft labels are computed in float32 (the full pass and its log-softmax), not "
                            f"{m['compute_dtype']}", "pass --labels hard for a bfloat16 states pass, or "
                            "--compute-dtype float32")
        f = root / "manifest.json"
        if f.is_file():
            try:
                have = json.loads(f.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise DataError(f"{f} is not valid JSON ({e})", "remove the cache directory to rebuild it") from None
            refuse_other_labels(root, have, m["labels"])
            for k in ("schema", "target_fingerprint", "layers", "topk", "dtype", "card_hash", "max_seq_len"):
                if have.get(k) != m.get(k):
                    raise DataError(f"state cache {root} was made with another {k} ({have.get(k)!r} != {m.get(k)!r})",
                                    "pass another --cache directory, or remove this one")
            if compute_dtype_of(have) != m["compute_dtype"]:
                raise DataError(f"state cache {root} holds states computed in {compute_dtype_of(have)}, this asks "
                                f"for {m['compute_dtype']}", f"pass --compute-dtype {compute_dtype_of(have)} to "
                                "extend it, or another --cache directory (the default directories differ)")
            return cls(root, have)
        if root.exists() and not root.is_dir():
            raise DataError(f"state cache {root} is a file", "pass a directory for --cache")
        # a temporary file (a concurrent --shard process writing the manifest) does not make it foreign
        if root.is_dir() and any(not f.name.startswith(".") for f in root.iterdir()):
            raise DataError(f"{root} is a non-empty directory without a state-cache manifest",
                            "pass a new or empty --cache directory")
        return cls(root, m)

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> StateCache:
        f = Path(root) / "manifest.json"
        if not f.is_file():
            raise DataError(f"{root} is not a draft state cache (no manifest.json)", "run `lenpred draft train` first")
        return cls(Path(root), json.loads(f.read_text(encoding="utf-8")))

    @property
    def labels(self) -> str:
        """``soft`` (the target's top-K log-probabilities) or ``hard`` (the sampled tokens only)."""
        return labels_of(self.manifest)

    @property
    def compute_dtype(self) -> str:
        """``float32``, or ``bfloat16`` for a hard cache whose states pass ran in bfloat16."""
        return compute_dtype_of(self.manifest)

    def _ensure_dir(self) -> None:
        if not (self.root / "manifest.json").is_file():
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.root / "manifest.json", self.manifest)

    # ------------------------------------------------------------------ index
    def shard_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("shard-*.json") if (self.root / f"{p.stem}.safetensors").is_file())

    def index(self) -> dict[tuple[str, int], tuple[str, dict[str, Any], dict[str, Any]]]:
        """(prompt_id, sample_idx) -> (shard, sample entry, prompt entry). A shard that is truncated
        or corrupt is set aside (moved to ``corrupt/``, named on stderr): its samples count as not
        cached, so the next build regenerates them."""
        if self._index is None:
            idx = {}
            for name in self.shard_names():
                meta = self._shards.get(name) or self._read_shard_index(name)
                if meta is None:
                    continue
                self._shards[name] = meta
                for s in meta["samples"]:
                    idx[(s["prompt_id"], int(s["sample_idx"]))] = (name, s, meta["prompts"][s["prompt_id"]])
            self._index = idx
        return self._index

    def _read_shard_index(self, name: str) -> dict[str, Any] | None:
        """A shard's index, after checking that its tensors are whole; None (and set aside) if not."""
        from safetensors import safe_open

        try:
            meta = json.loads((self.root / f"{name}.json").read_text(encoding="utf-8"))
            names = ("aux", "tokens") + (_TOPK if self.labels == "soft" else ())
            with safe_open(str(self.root / f"{name}.safetensors"), framework="np") as f:
                rows = {k: f.get_slice(k).get_shape()[0] for k in names}
            n_rows = sum(int(p["n"]) for p in meta["prompts"].values()) + sum(int(s["n"]) for s in meta["samples"])
            n_k = sum(int(s["n"]) for s in meta["samples"])
            if rows["aux"] != n_rows or rows["tokens"] != n_rows or any(rows[k] != n_k for k in names[2:]):
                raise ValueError(f"{rows} rows where the index says {n_rows} / {n_k}")
            return meta
        except Exception as e:  # noqa: BLE001 -- any unreadable shard is set aside, whatever broke it
            self._set_aside(name, f"{type(e).__name__}: {e}".splitlines()[0])
            return None

    def _set_aside(self, name: str, why: str) -> None:
        import sys

        bad = self.root / "corrupt"
        bad.mkdir(exist_ok=True)
        for suffix in (".json", ".safetensors"):
            f = self.root / f"{name}{suffix}"
            if f.exists():
                os.replace(f, bad / f.name)
        print(f"lenpred: state cache shard {self.root / name} is truncated or corrupt ({why}); moved to {bad}, "
              "its samples will be teacher-forced again", file=sys.stderr, flush=True)

    def done_keys(self) -> set[tuple[str, int]]:
        return set(self.index())

    def n_tokens(self, keys: Iterable[tuple[str, int]] | None = None) -> int:
        idx = self.index()
        return sum(int(idx[k][1]["n"]) for k in (keys if keys is not None else idx) if k in idx)

    def load(self, key: tuple[str, int]) -> SampleStates:
        from safetensors import safe_open

        name, s, p = self.index()[key]
        with safe_open(str(self.root / f"{name}.safetensors"), framework="np") as f:
            pr, pn, sr, sn = int(p["row"]), int(p["n"]), int(s["row"]), int(s["n"])
            aux = np.concatenate([f.get_slice("aux")[pr : pr + pn], f.get_slice("aux")[sr : sr + sn]])
            tok = np.concatenate([f.get_slice("tokens")[pr : pr + pn], f.get_slice("tokens")[sr : sr + sn]])
            if self.labels == "hard":  # no logits: zero-width labels, the loss reads the next sampled tokens
                ids, logp = np.zeros((sn, 0), np.int32), np.zeros((sn, 0), np.float16)
            else:
                kr = int(s["topk_row"])
                ids = f.get_slice("topk_ids")[kr : kr + sn]
                logp = f.get_slice("topk_logp")[kr : kr + sn]
        return SampleStates(key[0], key[1], pn, tok, aux, ids, logp, str(s.get("stop_reason", "")))

    # ------------------------------------------------------------------ building
    def build(self, target: Any, jobs: list[tuple[str, list[int], list[tuple[int, list[int], str]]]], *,
              prompts_per_shard: int = 4, progress: Callable[[int, int], None] | None = None,
              writer: str = "") -> dict[str, float]:
        """Teacher-force the samples not cached yet. ``jobs``: (prompt_id, prompt ids, [(sample_idx,
        response ids, stop_reason)]). ``progress(tokens_done, samples_done)`` after each sample.
        Returns {"tokens": ..., "seconds": ...} of the work done now (response tokens). ``target`` is a
        :class:`lenpred.draft.target.Target`; a hard-label cache runs only its states-only pass.
        ``writer``: a name for this process's shards (``s0of2``), so that processes filling disjoint
        prompts of one cache at once never pick the same shard name."""
        done = self.done_keys()
        todo = []
        for pid, pids, samples in jobs:
            rest = [s for s in samples if (pid, s[0]) not in done]
            if rest:
                todo.append((pid, pids, rest))
        prompts = self._hard_prompts(target, todo, progress) if self.labels == "hard" else \
            self._soft_prompts(target, todo, progress)
        t0 = time.perf_counter()
        n_tok = 0
        buf: list[_Prompt] = []
        for entry in prompts:  # the shards are written as the prompts come, the last one partly filled
            n_tok += sum(row[1] for row in entry[4])
            buf.append(entry)
            if len(buf) >= prompts_per_shard:
                self._write_shard(buf, writer)
                buf = []
        if buf:
            self._write_shard(buf, writer)
        return {"tokens": float(n_tok), "seconds": time.perf_counter() - t0}

    def _soft_prompts(self, target: Any, todo: list[tuple[str, list[int], list[tuple[int, list[int], str]]]],
                      progress: Callable[[int, int], None] | None) -> Iterator[_Prompt]:
        """Soft labels: the full forward pass, the prompt once on its cache and each sample after it; the
        target's top-k log-probabilities at every response token are kept."""
        topk = int(self.manifest["topk"])
        for pid, pids, samples in todo:
            with torch.inference_mode():
                cache = target.new_cache()
                p_ids = torch.tensor([pids], device=target.device)
                _, p_aux = target.forward(p_ids, cache)  # (1, n_p, 3d)
                rows = []
                for sidx, rids, stop in samples:
                    if not rids:  # an empty response has no position to learn from
                        rows.append((sidx, 0, np.zeros((0, p_aux.shape[-1]), np.float16), np.zeros(0, np.int32),
                                     np.zeros((0, topk), np.int32), np.zeros((0, topk), np.float16), stop))
                        continue
                    logits, aux = target.forward(torch.tensor([rids], device=target.device), cache)  # (1, n_r, ·)
                    target.crop(cache, len(pids))
                    logp = torch.log_softmax(logits[0], dim=-1)  # (n_r, V)
                    top = torch.topk(logp, topk, dim=-1)  # sorted: column 0 is the argmax
                    rows.append((sidx, len(rids), _fp16(aux[0]), np.asarray(rids, np.int32),
                                 top.indices.to(torch.int32).cpu().numpy(), top.values.to(torch.float16).cpu().numpy(), stop))
                    if progress is not None:
                        progress(len(rids), 1)
            yield (pid, len(pids), _fp16(p_aux[0]), np.asarray(pids, np.int32), rows)

    def _hard_prompts(self, target: Any, todo: list[tuple[str, list[int], list[tuple[int, list[int], str]]]],
                      progress: Callable[[int, int], None] | None) -> Iterator[_Prompt]:
        """Hard labels: the states-only pass (no LM head), the prompt once and its samples batched on
        its cache; the tokens are the labels, so nothing else is kept."""
        states = target.states_only(self.compute_dtype)
        none_i, none_f = np.zeros((0, 0), np.int32), np.zeros((0, 0), np.float16)
        for pid, pids, samples in todo:
            got = states.sample_states(pids, [rids for _, rids, _ in samples])  # each (P + n_i, 3d) float32
            n_p = len(pids)
            rows = []
            for (sidx, rids, stop), a in zip(samples, got, strict=True):
                rows.append((sidx, len(rids), _fp16(a[n_p:]), np.asarray(rids, np.int32), none_i, none_f, stop))
                if progress is not None and rids:
                    progress(len(rids), 1)
            yield (pid, n_p, _fp16(got[0][:n_p]), np.asarray(pids, np.int32), rows)

    def _next_name(self, writer: str = "") -> str:
        """The next free shard name of ``writer`` (``shard-00012``, or ``shard-s0of2-00012``)."""
        head = f"shard-{writer}-" if writer else "shard-"
        pat = re.compile(re.escape(head) + r"(\d+)")
        nums = [int(m.group(1)) for n in (p.name for p in self.root.glob(f"{head}*")) if (m := pat.fullmatch(n.split(".")[0]))]
        return f"{head}{(max(nums) + 1 if nums else 0):05d}"

    def _write_shard(self, buf: list[_Prompt], writer: str = "") -> None:
        from safetensors.numpy import save_file

        self._ensure_dir()
        soft = self.labels == "soft"
        aux, tok, kid, klp = [], [], [], []
        prompts: dict[str, dict[str, int]] = {}
        samples: list[dict[str, Any]] = []
        row = krow = 0
        for pid, n_p, p_aux, p_tok, rows in buf:
            prompts[pid] = {"row": row, "n": n_p}
            aux.append(p_aux)
            tok.append(p_tok)
            row += n_p
            for sidx, n, s_aux, s_tok, ids, logp, stop in rows:
                entry = {"prompt_id": pid, "sample_idx": int(sidx), "row": row, "n": n, "topk_row": krow,
                         "stop_reason": stop}
                if not soft:
                    del entry["topk_row"]  # no label rows
                samples.append(entry)
                aux.append(s_aux)
                tok.append(s_tok)
                kid.append(ids)
                klp.append(logp)
                row += n
                krow += n
        name = self._next_name(writer)
        tensors = {"aux": np.ascontiguousarray(np.concatenate(aux)), "tokens": np.concatenate(tok)}
        if soft:
            tensors |= {"topk_ids": np.ascontiguousarray(np.concatenate(kid)),
                        "topk_logp": np.ascontiguousarray(np.concatenate(klp))}
        tmp = self.root / f".{name}.safetensors.tmp"
        save_file(tensors, str(tmp))
        os.chmod(tmp, 0o644)  # shared like every other artifact
        os.replace(tmp, self.root / f"{name}.safetensors")
        atomic_write_json(self.root / f"{name}.json", {"prompts": prompts, "samples": samples})  # the commit marker
        self._index = None


def refuse_other_labels(root: Path, have: dict[str, Any], want: str) -> None:
    """Refuse to extend the cache at ``root`` (manifest ``have``) with labels of another kind."""
    kind = labels_of(have)
    if kind != want:
        words = "no logits" if kind == "hard" else f"the target's top-{have.get('topk')}"
        raise DataError(f"state cache {root} holds {kind} labels ({words}), this asks for {want} labels",
                        f"pass --labels {kind} to extend it, or another --cache directory for {want} labels "
                        "(the default directories differ by label kind)")


def _fp16(x: torch.Tensor) -> np.ndarray:
    y = x.float()
    if bool((y.abs() > 65000).any()):
        raise DataError("a target hidden state exceeds float16's range", "cache in float32 (not implemented) or clip")
    return y.to(torch.float16).cpu().numpy()
