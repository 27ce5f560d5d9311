"""llama.cpp engine: many sequences in one context through llama-cpp-python's low-level batch API.

One ``llama_context`` holds ``n_parallel`` sequence slots. Each step packs one ``llama_batch`` with
the next token of every decoding slot plus prompt chunks of newly admitted jobs (up to ``n_batch``
tokens), runs ``llama_decode`` once, and samples every slot that produced logits with its own
sampler chain (top-k -> top-p -> temperature -> seeded draw). A finished slot's KV cells are
removed (``llama_memory_seq_rm``) and the slot is refilled with the next job at once, so no step
is spent on padding. A prompt is prefilled once for its K samples: siblings copy its K/V (see
``_start``). Where the time goes (one core, 135M Q4_1): ~75% is the Q4_1 matmul kernel
(``ggml_vec_dot_q4_1_q8_1``, no repacked/AMX path in this build), so one core tops out near 100
prompt tok/s and 65-85 decode tok/s at 16-64 sequences (less as contexts grow: each stream's
attention spans the longest stream's cells); sampling is ~0.6 ms per slot per step.

Needs the optional extra: ``pip install 'lenpred[llamacpp]'`` (compiles llama.cpp, ~10 minutes).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from lenpred.collect.base import ENGINES, EngineOptions, EngineSetup, Job, Result, SamplingConfig
from lenpred.errors import EngineError


class LlamaCppOptions(EngineOptions):
    """Options of the llama.cpp engine: all runtime only (the card records the GGUF file instead)."""

    n_parallel: int = Field(16, ge=1, description="llamacpp: sequences decoded together")
    n_batch: int = Field(512, ge=1, description="llamacpp: tokens per llama_decode call")
    n_threads: int | None = Field(None, ge=1, description="llamacpp: CPU threads (unset: all cores)")


def _import_llama() -> Any:
    try:
        import llama_cpp
    except ImportError as e:
        raise EngineError(
            "the llamacpp engine needs llama-cpp-python, which is not installed",
            "pip install 'lenpred[llamacpp]' (or use --engine hf)",
        ) from e
    return llama_cpp


_LOG_CB: Any = None


def _quiet(L: Any) -> None:
    """Silence llama.cpp's stderr chatter (model/context load logs) unless LENPRED_LLAMA_LOG=1."""
    global _LOG_CB
    if os.environ.get("LENPRED_LLAMA_LOG") == "1" or _LOG_CB is not None:
        return
    _LOG_CB = L.llama_log_callback(lambda level, text, user_data: None)
    L.llama_log_set(_LOG_CB, ctypes.c_void_p(0))


@dataclass
class _Slot:
    job: Job
    sampler: Any
    fed: int = 0  # prompt tokens already in the KV cache
    pos: int = 0
    out: list[int] = field(default_factory=list)
    pending: int | None = None  # sampled token not yet fed back
    logits_idx: int = -1  # index in the current batch whose logits belong to this slot
    in_kv: int = 0  # prompt tokens whose K/V a finished llama_decode has written (a copy source needs P-1)
    waits: bool = False  # a sibling of a live slot's prompt: waits for its prefix instead of prefilling


@ENGINES.register("llamacpp")
class LlamaCppEngine:
    """Continuous batching over a llama.cpp context. ``gguf_path`` is the model file."""

    name: ClassVar[str] = "llamacpp"

    def __init__(
        self,
        gguf_path: str | Path,
        sampling: SamplingConfig,
        options: LlamaCppOptions | None = None,
        *,
        max_prompt_tokens: int = 1024,
        detokenize: Any = None,
        kv_unified: bool = False,
        share_prefix: bool = True,
    ) -> None:
        """``options``: sequences decoded together, tokens per decode call, CPU threads (default
        ``LlamaCppOptions()``); ``max_prompt_tokens`` sizes each sequence's context; ``detokenize(ids)``
        replaces llama.cpp's own detokenizer; ``kv_unified`` and ``share_prefix``: see the module docstring."""
        options = options or LlamaCppOptions()
        self.L = _import_llama()
        self.gguf_path = Path(gguf_path)
        if not self.gguf_path.is_file():
            raise EngineError(f"GGUF file {self.gguf_path} not found", "pass a .gguf model for --engine llamacpp")
        self.sampling = sampling
        self.n_parallel = int(options.n_parallel)
        self.n_batch = int(options.n_batch)
        self.n_threads = int(options.n_threads or os.cpu_count() or 2)
        self.detokenize = detokenize
        self.share_prefix = bool(share_prefix)
        L = self.L
        _quiet(L)
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(str(self.gguf_path).encode(), mp)
        if not self.model:
            raise EngineError(f"llama.cpp could not load {self.gguf_path}",
                              "check that the file is a GGUF this llama-cpp-python build supports, or use --engine hf")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.per_seq_ctx = int(max_prompt_tokens + sampling.max_new_tokens + 8)
        cp = L.llama_context_default_params()
        cp.n_ctx = self.per_seq_ctx * self.n_parallel
        cp.n_batch = self.n_batch
        cp.n_ubatch = self.n_batch
        cp.n_seq_max = self.n_parallel
        cp.n_threads = self.n_threads
        cp.n_threads_batch = self.n_threads
        # Per-sequence KV streams (the default) keep each token's attention over its own sequence;
        # a unified pool makes every token attend over all sequences' cells (masked), which costs
        # O(batch x all cells) per step and measured slower here.
        cp.kv_unified = bool(kv_unified)
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise EngineError("llama.cpp could not create a context", "lower --n-parallel or --max-new-tokens")
        self.mem = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(self.n_batch, 0, 1)
        self._closed = False

    # ------------------------------------------------------------------ registry glue
    Options: ClassVar[type[LlamaCppOptions]] = LlamaCppOptions

    @classmethod
    def _gguf(cls, spec: Any) -> Path:
        if spec.gguf_path is None:
            raise EngineError(
                f"model {spec.id!r} has no GGUF file for the llamacpp engine",
                "pass a .gguf file or a folder holding one as --model, or use --engine hf",
            )
        return Path(spec.gguf_path)

    @classmethod
    def identity(cls, options: LlamaCppOptions, setup: EngineSetup) -> dict[str, Any]:
        L = _import_llama()
        # the weights file matters (another quantisation is another model); no option changes samples
        return {"name": cls.name, "version": L.__version__, "weights": cls._gguf(setup.spec).name, **options.card()}

    @classmethod
    def create(cls, options: LlamaCppOptions, setup: EngineSetup) -> LlamaCppEngine:
        tok = setup.tokenizer
        return cls(
            cls._gguf(setup.spec),
            setup.sampling,
            options,
            max_prompt_tokens=setup.max_prompt_tokens,
            detokenize=lambda ids: tok.decode(list(ids), skip_special_tokens=False),
        )

    # ------------------------------------------------------------------ sampling
    def _new_sampler(self, job: Job) -> Any:
        """penalties -> temperature -> top-k -> top-p -> min-p -> seeded draw (the vLLM order)."""
        L, s = self.L, self.sampling
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        if s.repetition_penalty != 1.0:
            # Window = the whole sequence. Prompt tokens are accepted first so that, as in
            # transformers and vLLM, the penalty covers the prompt as well as the output.
            n_vocab = L.llama_vocab_n_tokens(self.vocab)
            pen = L.llama_sampler_init_penalties(n_vocab, self.per_seq_ctx, s.repetition_penalty, 0.0, 0.0)
            for t in job.prompt_token_ids:
                L.llama_sampler_accept(pen, t)
            L.llama_sampler_chain_add(chain, pen)
        if s.frequency_penalty or s.presence_penalty:  # output tokens only, as in OpenAI / vLLM
            n_vocab = L.llama_vocab_n_tokens(self.vocab)
            L.llama_sampler_chain_add(
                chain, L.llama_sampler_init_penalties(n_vocab, self.per_seq_ctx, 1.0, s.frequency_penalty, s.presence_penalty)
            )
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(s.temperature))
        if s.top_k > 0:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(s.top_k))
        if s.top_p < 1.0:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(s.top_p, 1))
        if s.min_p > 0.0:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_min_p(s.min_p, 1))
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(job.seed & 0xFFFFFFFF))
        return chain

    def _text(self, ids: list[int]) -> str:
        if self.detokenize is not None:
            return str(self.detokenize(ids))
        buf = ctypes.create_string_buffer(64)
        parts = []
        for t in ids:
            n = self.L.llama_token_to_piece(self.vocab, t, buf, len(buf), 0, False)
            parts.append(buf.raw[: max(n, 0)])
        return b"".join(parts).decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ loop
    def _start(self, sid: int, sl: _Slot, slots: dict[int, _Slot]) -> None:
        """Start a slot's prompt from a sibling's K/V where one holds it, else wait for or prefill it.

        The K samples of a prompt are consecutive jobs, so without this every sample prefilled the
        same prompt again (prefill is ~20% of the reference run's work and most of a short run's).
        Per-sequence streams copy whole streams (``llama_memory_seq_cp`` over the full range, applied
        at the next ``llama_decode`` before its batch); the copy's cells from position P-1 on are then
        dropped, and the slot feeds the last prompt token itself to get its own logits. A source must
        hold the prefix as written by a finished decode (``in_kv``), so a slot copied into in this
        step is never one. A sibling of a slot that is still prefilling the prompt waits for it; with
        neither, the slot prefills the prompt itself.
        """
        ids = sl.job.prompt_token_ids
        P = len(ids)
        prefilling = False
        for src_id, src in slots.items():
            if src_id == sid or src.waits or src.job.prompt_token_ids != ids:
                continue
            if src.in_kv >= P - 1:
                self.L.llama_memory_seq_cp(self.mem, src_id, sid, -1, -1)
                self.L.llama_memory_seq_rm(self.mem, sid, P - 1, -1)
                sl.fed = sl.pos = P - 1
                sl.waits = False
                return
            prefilling = True
        sl.waits = prefilling

    def _fill(self, slots: dict[int, _Slot], free: list[int], jobs: Iterator[Job], exhausted: bool) -> bool:
        """Give free sequence slots the next jobs; returns whether the jobs ran out."""
        max_new = self.sampling.max_new_tokens
        while free and not exhausted:
            job = next(jobs, None)
            if job is None:
                return True
            if len(job.prompt_token_ids) + max_new + 1 > self.per_seq_ctx:
                raise EngineError(
                    f"prompt {job.prompt_id!r} ({len(job.prompt_token_ids)} tokens) does not fit the context "
                    f"built for max_prompt_tokens={self.per_seq_ctx - max_new - 8}",
                    "raise max_prompt_tokens when creating the engine",
                )
            slots[free.pop()] = _Slot(job=job, sampler=self._new_sampler(job))
        return exhausted

    def _pack(self, slots: dict[int, _Slot]) -> int:
        """Pack one batch: a token for every decoding slot first, then prompt chunks; returns its size."""
        b = self.batch
        n = 0

        def add(tok: int, pos: int, seq: int, want_logits: bool) -> int:
            nonlocal n
            b.token[n] = tok
            b.pos[n] = pos
            b.n_seq_id[n] = 1
            b.seq_id[n][0] = seq
            b.logits[n] = 1 if want_logits else 0
            n += 1
            return n - 1

        for sid, sl in slots.items():
            sl.logits_idx = -1
            if sl.pending is not None:
                sl.logits_idx = add(sl.pending, sl.pos, sid, True)
                sl.pos += 1
                sl.pending = None
        for sid, sl in slots.items():
            P = len(sl.job.prompt_token_ids)
            if not sl.waits and sl.fed < P and n < self.n_batch:
                take = min(P - sl.fed, self.n_batch - n)
                for k in range(sl.fed, sl.fed + take):
                    last = k == P - 1
                    idx = add(sl.job.prompt_token_ids[k], k, sid, last)
                    if last:
                        sl.logits_idx = idx
                sl.fed += take
                sl.pos = sl.fed
        return n

    def generate(self, jobs: Iterator[Job]) -> Iterator[Result]:
        L = self.L
        slots: dict[int, _Slot] = {}
        free = list(range(self.n_parallel - 1, -1, -1))
        jobs = iter(jobs)
        exhausted = False
        b = self.batch
        max_new = self.sampling.max_new_tokens
        while True:  # one llama_decode per pass: every slot's next token, then prompt chunks
            exhausted = self._fill(slots, free, jobs, exhausted)
            if not slots:
                return
            if self.share_prefix:
                for sid, sl in slots.items():
                    if sl.fed == 0 and sl.pending is None and len(sl.job.prompt_token_ids) > 1:
                        self._start(sid, sl, slots)
            n = self._pack(slots)
            b.n_tokens = n
            rc = L.llama_decode(self.ctx, b) if n else 0
            if rc != 0:
                raise EngineError(f"llama_decode failed with code {rc}", "lower --n-parallel (KV cache full?)")
            if n:
                for sl in slots.values():
                    sl.in_kv = sl.fed
            for sid in list(slots):
                sl = slots[sid]
                if sl.logits_idx < 0:
                    continue
                tok = int(L.llama_sampler_sample(sl.sampler, self.ctx, sl.logits_idx))
                eog = bool(L.llama_vocab_is_eog(self.vocab, tok))
                if not eog:
                    sl.out.append(tok)
                if eog or len(sl.out) >= max_new:
                    yield Result(
                        prompt_id=sl.job.prompt_id,
                        sample_idx=sl.job.sample_idx,
                        token_ids=tuple(sl.out),
                        stop_reason="eos" if eog else "length",
                        text=self._text(sl.out),
                        seed=sl.job.seed,
                    )
                    L.llama_sampler_free(sl.sampler)
                    L.llama_memory_seq_rm(self.mem, sid, -1, -1)
                    del slots[sid]
                    free.append(sid)
                else:
                    sl.pending = tok

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)
