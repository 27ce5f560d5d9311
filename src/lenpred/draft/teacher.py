"""Teacher forcing sized for OUTLETS rows: the target's three captured states, no logits, batched by prompt.

Draft training needs the target's next-token distribution at every response token; OUTLETS rows need
only the hidden states the draft reads (``hidden_states[j]`` for its three layers ``j``). So
:class:`StatesOnlyTarget` runs the target's decoder stack up to the highest of those layers and stops:
no final norm, no LM head, no layers above it (for SmolLM2-135M and layers 2 / 15 / 27: 27 of 30
layers and no 49,152-way head, 1.4x fewer multiply-adds a token than a full forward pass).

A prompt's samples share its prefix: :meth:`StatesOnlyTarget.sample_states` runs the prompt once, then
its responses together, right-padded, on copies of the prompt's key/value cache. Right padding needs no
attention mask: attention is causal, so a real token never sees the pads after it, and the pads' own
states are dropped. Responses of very different lengths go in separate batches (``max_pad``) so the
padding does not cost more than it saves.

``dtype``: ``float32``, or ``bfloat16`` (autocast: weights stay float32, matrix products run in bf16;
fast where the CPU has AMX or AVX-512 BF16, see :func:`cpu_bf16`, and on a GPU). The benchmark
``benchmarks/bench_teacher_forcing.py`` measures the speed and the rows' agreement with float32.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["COMPUTE_DTYPES", "StatesOnlyTarget", "cpu_bf16", "resolve_compute_dtype", "length_groups", "expand_cache"]

COMPUTE_DTYPES = ("auto", "float32", "bfloat16")
_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> list[str]:
    """The CPU flags that make bf16 matrix products fast here (``amx_bf16``, ``avx512_bf16``); [] if none
    (or the file cannot be read: not Linux)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return [f for f in _BF16_FLAGS if f in flags]


def resolve_compute_dtype(dtype: str, device: str = "cpu", *, cpuinfo: str | Path = "/proc/cpuinfo",
                          warn: Any = None) -> str:
    """``auto`` -> ``bfloat16`` on a GPU or a CPU with bf16 hardware, else ``float32``. ``bfloat16`` asked
    for on a CPU without it is answered with one line through ``warn`` and float32 is used."""
    from lenpred.errors import ConfigError

    if dtype not in COMPUTE_DTYPES:
        raise ConfigError(f"--compute-dtype {dtype!r} is not one of {', '.join(COMPUTE_DTYPES)}",
                          "pass auto, float32 or bfloat16")
    if not device.startswith("cpu"):
        return "bfloat16" if dtype == "auto" else dtype
    have = cpu_bf16(cpuinfo)
    if dtype == "auto":
        return "bfloat16" if have else "float32"
    if dtype == "bfloat16" and not have:
        if warn is not None:
            warn("bfloat16 asked for, but this CPU has neither amx_bf16 nor avx512_bf16 (bf16 would be emulated, "
                 "slower than float32): float32 is used (pass --compute-dtype float32 to silence this)")
        return "float32"
    return dtype


def length_groups(lengths: Sequence[int], max_pad: float = 0.25, max_tokens: int = 8192) -> list[list[int]]:
    """Indices of ``lengths`` in batches: sorted by length, a batch closed when padding to its longest
    would waste more than ``max_pad`` of its cells or exceed ``max_tokens`` cells."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    groups: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        cand = cur + [i]
        longest = max(lengths[j] for j in cand)
        cells = longest * len(cand)
        waste = 1.0 - sum(lengths[j] for j in cand) / cells if cells else 0.0
        if cur and (waste > max_pad or cells > max_tokens):
            groups.append(cur)
            cand = [i]
        cur = cand
    if cur:
        groups.append(cur)
    return groups


class StatesOnlyTarget:
    """A transformers causal LM seen as ids -> the concatenated states of three layers, (T, 3 d).

    ``layers``: ``hidden_states`` indices (the residual stream entering decoder layer j; 0 = the
    embeddings), as the draft head records them. The model is used as loaded (its own dtype, float32
    for lenpred's loaders); ``dtype='bfloat16'`` runs it under autocast.
    """

    def __init__(self, model: Any, layers: Sequence[int], dtype: str = "float32") -> None:
        import torch

        self.model = model
        self.layers = tuple(int(j) for j in layers)
        base = getattr(model, "model", model)
        self._decoder = getattr(base, "layers", None)
        self._embed = model.get_input_embeddings()
        if self._decoder is None:
            from lenpred.errors import ModelError

            raise ModelError(f"{type(model).__name__} has no decoder layer list (model.model.layers)",
                             "use a Llama-style causal LM (transformers)")
        n = len(self._decoder)
        if len(self.layers) != 3 or not all(0 <= j < n for j in self.layers):
            from lenpred.errors import ModelError

            raise ModelError(f"layers {self.layers} do not fit a target with {n} decoder layers",
                             f"use three layers in 0..{n - 1}")
        self._base = base
        params = inspect.signature(base.forward).parameters
        # transformers >= 5.2x names the argument `cache`; older versions `past_key_values`
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.dtype = dtype
        self.device = self._embed.weight.device
        self.autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if dtype == "bfloat16"
                          else contextlib.nullcontext())

    # ---------------------------------------------------------------- one forward pass
    @contextlib.contextmanager
    def _capture(self) -> Iterator[dict[int, Any]]:
        """Run only the decoder layers below the highest captured one; hooks keep hidden_states[j]."""
        import torch

        got: dict[int, Any] = {}
        top = max(self.layers)
        hooks = []

        def keep(j: int) -> Any:
            def hook(_m: Any, _inp: Any, out: Any) -> None:
                got[j] = out[0] if isinstance(out, tuple) else out
            return hook

        for j in self.layers:
            mod = self._embed if j == 0 else self._decoder[j - 1]  # hidden_states[j] = output of layer j - 1
            hooks.append(mod.register_forward_hook(keep(j)))
        full = self._base.layers
        self._base.layers = torch.nn.ModuleList(list(full)[:top])  # layers >= top are never needed
        try:
            yield got
        finally:
            self._base.layers = full
            for h in hooks:
                h.remove()

    def _run(self, ids: Any, cache: Any) -> Any:
        """ids (B, T) -> (B, T, 3d) float32 states; ``cache`` (a transformers cache or None) is extended."""
        import torch

        with self._capture() as got, self.autocast:
            self._base(input_ids=ids, use_cache=cache is not None, **{self._cache_kw: cache})
        return torch.cat([got[j].float() for j in self.layers], dim=-1)  # (B, T, 3d)

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # older transformers
            return DynamicCache()

    # ---------------------------------------------------------------- a prompt and its samples
    def sample_states(self, prompt: Sequence[int], responses: Sequence[Sequence[int]], *, max_pad: float = 0.25,
                      max_tokens: int = 8192) -> list[Any]:
        """States (P + n_i, 3d) float32 of prompt + each response, the prompt computed once."""
        import torch

        out: list[Any] = [None] * len(responses)
        dev = self.device
        with torch.inference_mode():
            cache = self.new_cache()
            p_aux = self._run(torch.tensor([list(prompt)], device=dev), cache)[0]  # (P, 3d)
            todo = [i for i, r in enumerate(responses) if len(r)]
            for i, r in enumerate(responses):
                if not len(r):
                    out[i] = p_aux.clone()
            for g in length_groups([len(responses[i]) for i in todo], max_pad, max_tokens):
                idx = [todo[k] for k in g]
                T = max(len(responses[i]) for i in idx)
                ids = torch.zeros((len(idx), T), dtype=torch.long, device=dev)  # right-padded with id 0
                for b, i in enumerate(idx):
                    ids[b, : len(responses[i])] = torch.as_tensor(list(responses[i]), dtype=torch.long)
                kv = expand_cache(cache, len(idx))
                r_aux = self._run(ids, kv)  # (B, T, 3d)
                for b, i in enumerate(idx):
                    out[i] = torch.cat([p_aux, r_aux[b, : len(responses[i])]])
        return out


def expand_cache(cache: Any, batch: int) -> Any:
    """A copy of a batch-1 cache repeated ``batch`` times (the original kept)."""
    import copy

    kv = copy.deepcopy(cache)
    if batch > 1:
        kv.batch_repeat_interleave(batch)
    return kv
