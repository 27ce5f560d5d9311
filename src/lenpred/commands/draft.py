"""``lenpred draft``: EAGLE-3 draft heads -- ``train`` one for a run's target (resumable), ``cache`` a run's
teacher-forced states, ``inspect`` or ``convert`` one (docs/draft.md; each action's ``--help`` says what it does)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lenpred.config import add_arguments as config_flags
    from lenpred.draft.train_config import DraftTrainConfig

    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = sub.add_parser("train", help="train a head on a run's responses (training prompts only)",
                       description="train an EAGLE-3 head on a run's own responses (self-distillation)")
    t.add_argument("--run", "--run-dir", dest="run", required=True,
                   help="run directory with token ids (made by `lenpred collect`); --run-dir is the spelling "
                        "to use under torchrun, whose own --run-path swallows an abbreviated --run")
    t.add_argument("--out", required=True, help="output head directory")
    t.add_argument("--model", help="target model (default: the run's model)")
    t.add_argument("--cache", help="teacher-forced state cache (default: under $LENPRED_HOME/draft-states); a cache "
                                   "made with `draft cache --labels hard` trains on the sampled tokens")
    t.add_argument("--ckpt", help="checkpoint directory (default: under $LENPRED_HOME/draft-train)")
    t.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    t.add_argument("--device", default="cpu", help="torch device for the target and the head (cpu, cuda, ...)")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    config_flags(t, DraftTrainConfig)
    f = sub.add_parser("cache", help="teacher-force a run's samples into the state cache (resumable)",
                       description="teacher-force every sample of the split's chosen roles into the state cache that "
                                   "`draft train` and `outlets features` read; resumable, sharded")
    f.add_argument("--run", "--run-dir", dest="run", required=True, help="run directory with token ids")
    f.add_argument("--roles", default="train,val,test", help="split roles, in order (default: train,val,test)")
    f.add_argument("--model", help="target model (default: the run's model)")
    f.add_argument("--cache", help="state cache directory (default: under $LENPRED_HOME/draft-states)")
    f.add_argument("--layers", help="target layers as 'a,b,c' (default: 2, L//2, L-3)")
    f.add_argument("--max-seq-len", type=int, default=2048, help="longer samples are cut to this many tokens")
    f.add_argument("--topk", type=int, default=64, help="target top-k log-probabilities cached per response token")
    f.add_argument("--labels", choices=["soft", "hard"], default="soft",
                   help="soft: the target's top-k (a full pass with its LM head); hard: no logits, the states-only "
                        "pass (draft training then learns the run's sampled tokens; --topk is not used)")
    f.add_argument("--compute-dtype", default="float32", choices=["auto", "float32", "bfloat16"],
                   help="arithmetic of the hard-label states pass: float32 (default), bfloat16, or auto (bfloat16 "
                        "where the CPU has amx_bf16 or avx512_bf16, or on a GPU); recorded in the cache, which keeps "
                        "it. Soft labels are float32 only")
    f.add_argument("--shard", help="I/N: fill only slice I of N of the prompts, under shard names of its own, so N "
                                   "processes (one thread each) fill one cache at once; nothing to merge")
    f.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    f.add_argument("--device", default="cpu", help="torch device for the target (cpu, cuda, ...)")
    f.add_argument("--no-progress", action="store_true", help="no progress bars")
    i = sub.add_parser("inspect", help="describe a head; with --model, check it against that target")
    i.add_argument("head", help="head directory (config.json + model.safetensors or pytorch_model.bin)")
    i.add_argument("--model", help="check the head against this target")
    c = sub.add_parser("convert", help="re-save a head in the released layout with lenpred's meta.json")
    c.add_argument("head", help="source head directory")
    c.add_argument("--out", required=True, help="output head directory")
    c.add_argument("--model", help="the head's target (checked, and recorded in meta.json)")
    c.add_argument("--format", choices=["safetensors", "bin"], default="safetensors", help="weight file form")
    c.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default="float16", help="weight dtype")


def run(args: argparse.Namespace) -> int:
    from lenpred.commands.preflight import preflight

    preflight("draft", args, args.action)
    return {"train": _train, "cache": _cache, "inspect": _inspect, "convert": _convert}[args.action](args)


def _cache(args: argparse.Namespace) -> int:
    from lenpred.draft.teacher import resolve_compute_dtype
    from lenpred.draft.train_config import DraftTrainConfig
    from lenpred.draft.train_data import check_cache_labels, fill_state_cache, open_run_target
    from lenpred.features.shards import parse_shard
    from lenpred.report.draft import cache_line

    def say(msg: str) -> None:
        print(f"lenpred draft cache: {msg}", file=sys.stderr, flush=True)

    roles = tuple(dict.fromkeys(r.strip() for r in args.roles.split(",") if r.strip()))  # checked by preflight
    shard = parse_shard(args.shard)  # checked by preflight
    check_cache_labels(args.cache, args.labels)  # another kind of labels: refused before the target loads
    dtype = "float32" if args.labels == "soft" else resolve_compute_dtype(args.compute_dtype, args.device, warn=say)
    cfg = DraftTrainConfig(max_seq_len=args.max_seq_len, topk=args.topk, layers=args.layers)
    rt = open_run_target(args.run, model=args.model, cfg=cfg, device=args.device, threads=args.threads,
                         cache_dir=args.cache)
    cdir, tf, n = fill_state_cache(rt.source, cfg, cache_dir=args.cache, roles=roles, progress=not args.no_progress,
                                   labels=args.labels, compute_dtype=dtype, shard=shard)
    part = f", slice {shard[0]}/{shard[1]}" if shard[1] > 1 else ""
    say(f"{cache_line(tf, n, roles, cdir)} ({args.labels} labels, {dtype}{part})")
    return 0


def _train(args: argparse.Namespace) -> int:
    from lenpred.config import from_arguments
    from lenpred.draft.distributed import Distributed
    from lenpred.draft.train import TrainJob, train_draft
    from lenpred.draft.train_config import DraftTrainConfig
    from lenpred.draft.train_data import open_run_target
    from lenpred.report.draft import train_lines

    cfg = from_arguments(DraftTrainConfig, args, where="draft train")
    out = Path(args.out)  # checked by preflight (the overwrite rule) before anything was read
    rt = open_run_target(args.run, model=args.model, cfg=cfg, device=args.device, threads=args.threads,
                         cache_dir=args.cache, train=True)
    main = Distributed().main  # under torchrun only rank 0 speaks

    def say(msg: str) -> None:
        print(f"lenpred draft train: {msg}", file=sys.stderr, flush=True)

    job = TrainJob(rt.source, cfg, out, rt.eos_id, cache_dir=args.cache, ckpt_dir=args.ckpt, device=rt.device,
                   progress=not args.no_progress and main)
    res = train_draft(job, log=say)
    for line in train_lines(res) if main else ():
        say(line)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from lenpred.draft.config import DraftConfig
    from lenpred.draft.io import check_against_target, load_draft, read_config_json, target_config
    from lenpred.report.draft import head_lines, target_line

    head = load_draft(args.head)
    for line in head_lines(head, DraftConfig.unknown_fields(read_config_json(head.path))):
        print(line)
    if args.model:
        spec, tcfg = target_config(args.model)
        layers = check_against_target(head, tcfg, fingerprint=spec.fingerprint)
        print(target_line(args.model, layers, tcfg.num_hidden_layers))
    return 0


def _convert(args: argparse.Namespace) -> int:
    from lenpred.draft.io import convert_draft

    out = Path(args.out)  # checked by preflight (the overwrite rule)
    convert_draft(args.head, out, model=args.model, fmt=args.format, dtype=args.dtype)
    print(f"lenpred draft convert: wrote {out} ({args.format}, {args.dtype})", file=sys.stderr)
    return 0
