"""transformers engine with continuous batching: a finished row is refilled at once.

``model.generate`` keeps every row of a batch until the longest one ends, so at batch 16-32 about
half the decode steps are padding (measured on these CPUs). This engine keeps its own key/value
tensors instead: each row holds one sample, right-aligned in a left-padded cache; when a row
finishes, the next job is prefilled alone and written into that row, and columns no row uses any
more are trimmed from the left. The padding share (row-steps without a live sample) is reported
so the effect is measurable (see ``benchmarks/bench_collect.py``).

Sampling runs per row with its own seeded ``torch.Generator``: repetition penalty over prompt +
output, frequency / presence penalties over the output, then temperature, top-k, top-p, min-p
(the order vLLM uses).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field

from lenpred.collect.base import ENGINES, EngineOptions, EngineSetup, Job, Result, SamplingConfig
from lenpred.errors import EngineError
from lenpred.models.loading import eos_ids


def card_warpers(sampling: SamplingConfig) -> Any:
    """The card's warpers after the penalties, in vLLM's order: temperature, top-k, top-p, min-p
    (one list for the hf engine and the speculative sampler, so both sample the same card)."""
    from transformers import (
        LogitsProcessorList,
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    procs: list[Any] = [TemperatureLogitsWarper(sampling.temperature)]
    if sampling.top_k > 0:
        procs.append(TopKLogitsWarper(sampling.top_k))
    if sampling.top_p < 1.0:
        procs.append(TopPLogitsWarper(sampling.top_p))
    if sampling.min_p > 0:
        procs.append(MinPLogitsWarper(sampling.min_p))
    return LogitsProcessorList(procs)

class HFOptions(EngineOptions):
    """Options of the transformers engine. ``dtype`` changes the numerics, hence the samples: it is
    part of the card; batch size and device are runtime only."""

    card_fields: ClassVar[tuple[str, ...]] = ("dtype",)

    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="hf: weight and compute dtype (part of the card)")
    batch_size: int = Field(16, ge=1, description="hf: rows decoded together")
    device: str = Field("cpu", description="hf: torch device (cpu, cuda, cuda:1)")


@dataclass
class _Row:
    job: Job
    gen: Any  # torch.Generator
    seen: Any  # (V,) bool: tokens in prompt + output, for the repetition penalty
    counts: Any  # (V,) float: output token counts, for frequency / presence penalties
    pos: int  # position id of the next token fed
    last: int  # token to feed next
    out: list[int] = field(default_factory=list)


def _cache_kv(cache: Any) -> list[tuple[Any, Any]]:
    """(K, V) per layer from a transformers cache object (v5 ``layers`` or v4 ``key_cache``)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    return [tuple(x) for x in cache]  # legacy tuple of tuples


def _out_cache(out: Any) -> Any:
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values


def _cache_kwarg(model: Any) -> str:
    """transformers >= 5.2x names the cache argument ``cache``; older versions ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _make_cache(kv: list[tuple[Any, Any]]) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(ddp_cache_data=kv)
    except TypeError:  # older transformers
        return DynamicCache.from_legacy_cache(tuple(kv))


@ENGINES.register("hf")
class HFEngine:
    name: ClassVar[str] = "hf"

    def __init__(self, model: Any, tokenizer: Any, sampling: SamplingConfig, batch_size: int = 16, device: str = "cpu") -> None:
        import torch

        self.torch = torch
        self.model = model
        self.tok = tokenizer
        self.s = sampling
        self.B = int(batch_size)
        self.device = torch.device(device)
        self.eos = set(eos_ids(model, tokenizer))
        self.vocab = int(model.get_output_embeddings().weight.shape[0])
        self.cache_kw = _cache_kwarg(model)
        self.row_steps = 0  # decode row-steps computed
        self.live_steps = 0  # ... of which carried a live sample
        self.warp = card_warpers(sampling)

    # ----------------------------------------------------------- registry glue
    Options: ClassVar[type[HFOptions]] = HFOptions

    @classmethod
    def identity(cls, options: HFOptions, setup: EngineSetup) -> dict[str, Any]:
        import torch
        import transformers

        return {"name": cls.name, "version": transformers.__version__, "torch": torch.__version__.split("+")[0], **options.card()}

    @classmethod
    def create(cls, options: HFOptions, setup: EngineSetup) -> HFEngine:
        from lenpred.models import load

        lm = load(setup.model, device=options.device, dtype=options.dtype)
        return cls(lm.model, lm.tokenizer, setup.sampling, batch_size=options.batch_size, device=options.device)

    @property
    def padding_share(self) -> float:
        return 1.0 - self.live_steps / self.row_steps if self.row_steps else 0.0

    # ----------------------------------------------------------- sampling
    def _sample(self, logits: Any, rows: list[tuple[int, _Row]]) -> list[int]:
        """logits: (n, V) for the given rows, in that order."""
        torch = self.torch
        logits = logits.float()
        if self.s.repetition_penalty != 1.0:
            seen = torch.stack([r.seen for _, r in rows])  # (n, V)
            pen = torch.where(logits > 0, logits / self.s.repetition_penalty, logits * self.s.repetition_penalty)
            logits = torch.where(seen, pen, logits)
        if self.s.frequency_penalty or self.s.presence_penalty:
            counts = torch.stack([r.counts for _, r in rows])  # (n, V)
            logits = logits - self.s.frequency_penalty * counts - self.s.presence_penalty * (counts > 0).float()
        logits = self.warp(None, logits)
        probs = torch.softmax(logits, dim=-1)  # (n, V)
        out = []
        for k, (_, r) in enumerate(rows):
            t = int(torch.multinomial(probs[k], 1, generator=r.gen).item())
            r.seen[t] = True
            r.counts[t] += 1
            out.append(t)
        return out

    # ----------------------------------------------------------- main loop
    @staticmethod
    def _finish(r: _Row, stop: str, text: str) -> Result:
        return Result(r.job.prompt_id, r.job.sample_idx, tuple(r.out), stop, text, r.job.seed)

    def _take_jobs(self, rows: list[_Row | None], jobs: Iterator[Job], exhausted: bool
                   ) -> tuple[list[tuple[int, Job]], bool]:
        """The next jobs for the free rows: (row index, job) pairs, and whether the jobs ran out."""
        new: list[tuple[int, Job]] = []
        for b in range(self.B):
            if rows[b] is not None or exhausted:
                continue
            job = next(jobs, None)
            if job is None:
                return new, True
            if not job.prompt_token_ids:
                raise EngineError(f"prompt {job.prompt_id!r} is empty after tokenization",
                                  "drop the empty prompt from the prompt file, or render it with the chat template")
            new.append((b, job))
        return new, exhausted

    def _decode_step(self, rows: list[_Row | None], live: list[tuple[int, _Row]], kv: Any, mask: Any
                     ) -> tuple[Any, Any, Any]:
        """One decode step for all rows (free rows attend only to themselves): the live rows' logits
        (n_live, V), the grown cache and mask."""
        torch, dev, B = self.torch, self.device, self.B
        inp = torch.full((B, 1), int(next(iter(self.eos))), dtype=torch.long, device=dev)
        pos = torch.zeros((B, 1), dtype=torch.long, device=dev)
        for b, r in live:
            inp[b, 0] = r.last
            pos[b, 0] = r.pos
        T = mask.shape[1]
        step_mask = torch.cat([mask, torch.ones((B, 1), dtype=torch.long, device=dev)], dim=1)  # (B, T + 1)
        o = self.model(input_ids=inp, attention_mask=step_mask, position_ids=pos,
                       cache_position=torch.tensor([T], device=dev), use_cache=True,
                       **{self.cache_kw: _make_cache(kv)})
        for b in range(B):
            if rows[b] is None:
                step_mask[b, T] = 0
        self.row_steps += B
        self.live_steps += len(live)
        return o.logits[[b for b, _ in live], -1, :], _cache_kv(_out_cache(o)), step_mask

    def generate(self, jobs: Iterator[Job]) -> Iterator[Result]:
        torch = self.torch
        B, max_new = self.B, self.s.max_new_tokens
        rows: list[_Row | None] = [None] * B
        kv: list[tuple[Any, Any]] | None = None  # per layer (B, H, T, D)
        mask = torch.zeros((B, 0), dtype=torch.long, device=self.device)  # (B, T)
        jobs = iter(jobs)
        exhausted = False
        with torch.inference_mode():
            while True:
                # 1. refill free rows: one left-padded prefill for all new jobs
                new, exhausted = self._take_jobs(rows, jobs, exhausted)
                if new:
                    started = self._prefill(new)
                    for b, r, row_kv, first in started:
                        if first in self.eos:
                            yield self._finish(r, "eos", "")
                            continue  # the row stays free until the next pass
                        r.out.append(first)
                        r.last = first
                        if len(r.out) >= max_new:
                            yield self._finish(r, "length", self.tok.decode(r.out))
                            continue
                        kv, mask = self._insert(kv, mask, b, row_kv)
                        rows[b] = r
                live = [(b, r) for b, r in enumerate(rows) if r is not None]
                if not live:
                    if exhausted:
                        return
                    continue  # every new row finished inside its prefill: refill again, jobs remain
                # 2. one decode step for all rows (free rows attend only to themselves)
                logits, kv, mask = self._decode_step(rows, live, kv, mask)
                toks = self._sample(logits, live)
                for (b, r), t in zip(live, toks, strict=True):
                    r.pos += 1
                    if t in self.eos:
                        yield self._finish(r, "eos", self.tok.decode(r.out))
                    else:
                        r.out.append(t)
                        r.last = t
                        if len(r.out) < max_new:
                            continue
                        yield self._finish(r, "length", self.tok.decode(r.out))
                    rows[b] = None
                    mask[b] = 0
                # 3. trim columns no row uses any more
                used = mask.sum(dim=0) > 0
                if used.numel() and not bool(used[0]):
                    first = int(torch.nonzero(used)[0]) if bool(used.any()) else mask.shape[1]
                    mask = mask[:, first:]
                    kv = [(k[:, :, first:], v[:, :, first:]) for k, v in kv]

    def _prefill(self, new: list[tuple[int, Job]]) -> list[tuple[int, _Row, list[tuple[Any, Any]], int]]:
        """Prefill several prompts in one left-padded batch; sample each one's first token.

        Returns (row index, row state, the row's own (1, H, P_i, D) cache per layer, first token).
        """
        torch = self.torch
        dev = self.device
        n = len(new)
        P = max(len(j.prompt_token_ids) for _, j in new)
        ids = torch.full((n, P), int(next(iter(self.eos))), dtype=torch.long, device=dev)  # (n, P)
        am = torch.zeros((n, P), dtype=torch.long, device=dev)  # (n, P)
        for i, (_, j) in enumerate(new):
            L = len(j.prompt_token_ids)
            ids[i, P - L :] = torch.tensor(j.prompt_token_ids, device=dev)
            am[i, P - L :] = 1
        pos = (am.cumsum(-1) - 1).clamp(min=0)  # (n, P): each prompt starts at position 0
        o = self.model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=True)
        pkv = _cache_kv(_out_cache(o))  # per layer (n, H, P, D)
        out = []
        for i, (b, job) in enumerate(new):
            L = len(job.prompt_token_ids)
            gen = torch.Generator(device=dev).manual_seed(job.seed)
            seen = torch.zeros(self.vocab, dtype=torch.bool, device=dev)
            seen[ids[i, P - L :]] = True
            counts = torch.zeros(self.vocab, dtype=torch.float32, device=dev)
            r = _Row(job=job, gen=gen, seen=seen, counts=counts, pos=L, last=-1)
            first = self._sample(o.logits[i : i + 1, -1, :], [(b, r)])[0]
            row_kv = [(k[i : i + 1, :, P - L :], v[i : i + 1, :, P - L :]) for k, v in pkv]
            out.append((b, r, row_kv, first))
        return out

    def _insert(self, kv: list[tuple[Any, Any]] | None, mask: Any, b: int, new_kv: list[tuple[Any, Any]]) -> tuple[list[tuple[Any, Any]], Any]:
        """Write a prefilled (1, H, P, D) cache into row b, right-aligned; grow the cache on the left if needed."""
        torch = self.torch
        P = new_kv[0][0].shape[2]
        B = self.B
        if kv is None:
            kv = [
                (torch.zeros((B, *k.shape[1:]), dtype=k.dtype, device=k.device), torch.zeros((B, *v.shape[1:]), dtype=v.dtype, device=v.device))
                for k, v in new_kv
            ]
            mask = torch.zeros((B, P), dtype=torch.long, device=mask.device)
        T = mask.shape[1]
        if P > T:  # left-pad everything
            grow = P - T
            kv = [
                (torch.nn.functional.pad(k, (0, 0, grow, 0)), torch.nn.functional.pad(v, (0, 0, grow, 0)))
                for k, v in kv
            ]
            mask = torch.nn.functional.pad(mask, (grow, 0))
            T = P
        for (k, v), (nk, nv) in zip(kv, new_kv, strict=True):
            k[b].zero_()
            v[b].zero_()
            k[b, :, T - P :] = nk[0]
            v[b, :, T - P :] = nv[0]
        mask[b] = 0
        mask[b, T - P :] = 1
        return kv, mask

    def close(self) -> None:
        pass
