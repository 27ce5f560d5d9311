"""Cost probe of hard-label draft training (issue 38 part 4): the states-only pass and training steps on a
hard-label state cache, measured on a few training prompts and projected to the run's whole training split.

    python -m benchmarks.bench_draft_hard --run data/runs/smollm2-sharegpt --prompts 8 --steps 20 --threads 2 \\
        [--cache DIR] [--soft] [--out docs/results/draft_hard.json]

1. **States pass**: every sample of the first ``--prompts`` training prompts of the split (run order, as
   ``lenpred draft train --max-prompts`` picks them) through the target's states-only pass into a
   hard-label cache (``lenpred draft cache --labels hard``: no LM head, the prompt once and its samples
   batched on its cache), in ``--cache`` or a temporary folder. Rate = response tokens / wall seconds
   (the prompts' tokens are in the time, as they are in a real fill). ``--soft`` also fills a soft
   (top-64) cache of the same samples, today's pass, for the comparison.
2. **Training**: ``--steps`` optimiser steps of ``lenpred draft train`` on that cache (hard labels, the
   default settings otherwise: ``--tokens-per-batch`` tokens, ``--ttt-steps`` unroll steps), checkpoints
   and head in a temporary folder. s/step = the median of the steps but the first (it pays the set-up)
   and the last (it writes a checkpoint) where there are three or more, tokens/step = the mean over the steps taken (prompt + response; response positions
   are what the loss counts).
3. **Projection** to the training split: its response tokens (cut to ``max_seq_len`` as training cuts
   them) / the pass's rate, and one epoch = the number of batches the split packs into at
   ``--tokens-per-batch`` x s/step.

Small values (``--prompts 2 --steps 2``) make a smoke check; the figures are only as good as the sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.flags import refuse_other_figures


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="data/runs/smollm2-sharegpt", help="run directory with token ids and a split")
    ap.add_argument("--prompts", type=int, default=8, help="training prompts whose samples are measured")
    ap.add_argument("--steps", type=int, default=20, help="training steps measured")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--tokens-per-batch", type=int, default=2048, help="tokens per optimiser step (train's default)")
    ap.add_argument("--ttt-steps", type=int, default=3, help="unroll steps (train's default)")
    ap.add_argument("--cache", default=None, help="hard-label state cache to fill (default: a temporary folder)")
    ap.add_argument("--soft", action="store_true", help="also time today's soft (top-64) pass on the same samples")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    for name in ("prompts", "steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1")
    refuse_other_figures(args.out, "draft_hard")
    return args


def fill(rt: Any, cfg: Any, jobs: list[Any], cdir: Path, labels: str) -> dict[str, float]:
    """Teacher-force ``jobs`` into the cache at ``cdir`` with ``labels``: {"tokens", "seconds"} of this call."""
    from lenpred.draft.states import StateCache
    from lenpred.draft.train_data import cache_location, teacher_force

    _, manifest = cache_location(rt.run, rt.target, rt.lm.spec, cfg, cdir, labels)
    cache = StateCache.open_or_create(cdir, manifest)
    return teacher_force(cache, rt.target, jobs, progress=False)


def split_projection(rt: Any, cfg: Any) -> dict[str, Any]:
    """The training split's samples as training reads them: response and prompt tokens, optimiser steps per epoch."""
    from lenpred.draft.train_data import epoch_batches, state_cache_jobs

    jobs = state_cache_jobs(rt.run, rt.split, ("train",), cfg.max_seq_len)
    lengths = {(p, i): len(ids) + len(r) for p, ids, ss in jobs for i, r, _ in ss if r}
    return {"prompts": len(jobs), "samples": len(lengths),
            "response_tokens": sum(len(r) for _, _, ss in jobs for _, r, _ in ss),
            "prompt_tokens": sum(len(ids) for _, ids, _ in jobs),
            "steps_per_epoch": len(epoch_batches(list(lengths), lengths, cfg.tokens_per_batch, cfg.seed, 0))}


def train_steps(rt: Any, cfg: Any, cdir: Path, work: Path) -> dict[str, Any]:
    """``cfg.max_steps`` steps of ``lenpred draft train`` on the cache: per-step seconds and tokens."""
    from lenpred.draft.states import StateCache
    from lenpred.draft.train import TrainJob, train_draft
    from lenpred.draft.train_data import batch_at, load_training_data

    marks: list[float] = []
    t0 = time.perf_counter()
    job = TrainJob(rt.source, cfg, work / "head", rt.eos_id, cache_dir=cdir, ckpt_dir=work / "ckpt",
                   device=rt.device, progress=False)
    res = train_draft(job, on_step=lambda *_: marks.append(time.perf_counter()))
    times = [b - a for a, b in zip([t0, *marks[:-1]], marks, strict=True)]
    data = load_training_data(rt.run, rt.split, cfg, rt.eos_id)
    idx = StateCache.open(cdir).index()
    tok, resp = [], []
    for step in range(cfg.max_steps):
        keys = batch_at(step, data.keys, {k: int(idx[k][1]["n"]) + int(idx[k][2]["n"]) for k in data.keys},
                        cfg.tokens_per_batch, cfg.seed)
        tok.append(sum(int(idx[k][1]["n"]) + int(idx[k][2]["n"]) for k in keys))
        resp.append(sum(int(idx[k][1]["n"]) for k in keys))
    # the first step pays the warm-up (and the set-up before it), the last the final checkpoint
    steady = times[1:-1] if len(times) >= 3 else times[1:] or times
    return {"steps": res.steps, "s_per_step": statistics.median(steady), "s_per_step_all": times,
            "tokens_per_step": sum(tok) / len(tok), "response_tokens_per_step": sum(resp) / len(resp),
            "train_loss": res.train_loss, "train_acc": res.train_acc}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    from benchmarks.bench_teacher_forcing import cpu_model
    from lenpred.draft.train_config import DraftTrainConfig
    from lenpred.draft.train_data import load_training_data, open_run_target

    cfg = DraftTrainConfig(max_prompts=args.prompts, max_steps=args.steps, tokens_per_batch=args.tokens_per_batch,
                           ttt_steps=args.ttt_steps, val_samples=0, eval_every=0, checkpoint_every=10**9)
    rt = open_run_target(args.run, cfg=cfg, device=args.device, threads=args.threads, cache_dir=args.cache, train=True)
    import torch

    print(f"CPU: {cpu_model()}; torch {torch.__version__}, {torch.get_num_threads()} threads; device {rt.device}")
    data = load_training_data(rt.run, rt.split, cfg, rt.eos_id)
    n_resp = sum(len(r) for _, _, ss in data.jobs for _, r, _ in ss)
    n_prompt = sum(len(ids) for _, ids, _ in data.jobs)
    print(f"sample: the first {data.n_train_prompts} training prompts, {len(data.keys)} samples, "
          f"{n_resp:,} response + {n_prompt:,} prompt tokens")
    out: dict[str, Any] = {"bench": "draft_hard", "run": str(rt.run.path), "cpu": cpu_model(),
                           "threads": torch.get_num_threads(), "device": rt.device,
                           "sample": {"prompts": data.n_train_prompts, "samples": len(data.keys),
                                      "response_tokens": n_resp, "prompt_tokens": n_prompt},
                           "config": {"tokens_per_batch": cfg.tokens_per_batch, "ttt_steps": cfg.ttt_steps,
                                      "steps": cfg.max_steps}}
    with tempfile.TemporaryDirectory(prefix="bench-draft-hard-") as tmp:
        work = Path(tmp)
        cdir = Path(args.cache) if args.cache else work / "cache"
        tf = fill(rt, cfg, data.jobs, cdir, "hard")
        rate = tf["tokens"] / tf["seconds"] if tf["tokens"] else None
        out["states_pass"] = {"tokens": tf["tokens"], "seconds": tf["seconds"], "response_tokens_per_s": rate,
                              "cache": str(cdir)}
        print("states pass (hard labels): " + (f"{int(tf['tokens']):,} response tokens in {tf['seconds']:.1f} s, "
                                                f"{rate:.1f} response tokens/s" if rate else
                                                f"nothing to do: {cdir} held every sample (no rate)"))
        if args.soft:
            sf = fill(rt, cfg.replace(topk=64), data.jobs, work / "soft", "soft")
            srate = sf["tokens"] / sf["seconds"]
            out["soft_pass"] = {"tokens": sf["tokens"], "seconds": sf["seconds"], "response_tokens_per_s": srate}
            print(f"soft pass (top-64, today's cache): {srate:.1f} response tokens/s"
                  + (f"; hard is {rate / srate:.2f}x" if rate else ""))
        tr = train_steps(rt, cfg, cdir, work)
        out["training"] = tr
        every = ", ".join(f"{x:.2f}" for x in tr["s_per_step_all"])
        print(f"training (hard labels): {tr['steps']} steps, {tr['s_per_step']:.2f} s/step (median, the first and "
              f"last step left out where there are 3+; all: {every}), {tr['tokens_per_step']:.0f} tokens/step "
              f"({tr['response_tokens_per_step']:.0f} response)")
    proj = split_projection(rt, cfg)
    proj["pass_hours"] = proj["response_tokens"] / rate / 3600 if rate else None
    proj["epoch_hours"] = proj["steps_per_epoch"] * tr["s_per_step"] / 3600
    out["projection"] = proj
    print(f"training split: {proj['prompts']} prompts, {proj['samples']} samples, {proj['response_tokens']:,} response "
          f"+ {proj['prompt_tokens']:,} prompt tokens; {proj['steps_per_epoch']} steps of {cfg.tokens_per_batch} "
          "tokens per epoch")
    print("projection: states pass " + (f"{proj['pass_hours']:.2f} h" if rate else "unknown (no pass timed)")
          + f", one epoch of training {proj['epoch_hours']:.2f} h (at this sample's rates)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
