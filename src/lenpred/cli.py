"""Command-line entry point: parse arguments, build a config, call the library.

Each verb lives in ``lenpred.commands.<verb>`` and exposes ``add_arguments(parser)`` and
``run(args) -> int``; its one-line help and example are in :data:`VERBS`. Verb modules are imported
lazily so that ``lenpred --help`` stays fast and a verb's heavy imports (torch) load only when used.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence

from lenpred import __version__
from lenpred.errors import LenpredError

# verb -> (module, one-line help, example). The table is explicit on purpose: one place lists them all.
VERBS: dict[str, tuple[str, str, str]] = {
    "demo": (
        "lenpred.commands.demo",
        "short live run on the embedded model, then the committed reference run and its prefill bound",
        "lenpred demo --prompts 6 --samples 3",
    ),
    "collect": (
        "lenpred.commands.collect",
        "sample K responses per prompt under one fixed card into a resumable run directory",
        "lenpred collect --run data/runs/mine --model smollm2-135m --source sharegpt --prompts 64 --samples 8",
    ),
    "info": (
        "lenpred.commands.info",
        "summarise a run directory (card, progress, length statistics)",
        "lenpred info data/runs/smollm2-sharegpt",
    ),
    "model": (
        "lenpred.commands.model",
        "prepare / inspect a model (convert the embedded GGUF into the cache, print its fingerprint)",
        "lenpred model smollm2-135m",
    ),
    "bound": (
        "lenpred.commands.bound",
        "per-prompt length statistics, the prefill oracle bound, normal / affine / hazard analysis",
        "lenpred bound data/runs/smollm2-sharegpt --out out/bound",
    ),
    "simulate": (
        "lenpred.commands.simulate",
        "discrete-event simulation of prefill/decode serving under length-aware policies",
        "lenpred simulate --config experiments/sim/reproduction.json --out out/sim",
    ),
    "split": (
        "lenpred.commands.split",
        "write the run's fixed, seeded train / validation / test split by prompt (split.json)",
        "lenpred split data/runs/smollm2-sharegpt",
    ),
    "features": (
        "lenpred.commands.features",
        "prefill hidden states of every prompt, pooled, into a features artifact (resumable, --shard I/N)",
        "lenpred features --run data/runs/smollm2-sharegpt --out data/features/smollm2-sharegpt",
    ),
    "train": (
        "lenpred.commands.train",
        "train a length predictor (head) on a features artifact and the run's training split",
        "lenpred train --features data/features/smollm2-sharegpt --predictor mlp --out out/heads/mlp",
    ),
    "predict": (
        "lenpred.commands.predict",
        "write a predictions table (Parquet) for a run with a trained head or a synthetic model",
        "lenpred predict --head out/heads/mlp --run data/runs/smollm2-sharegpt --out out/preds/mlp.parquet",
    ),
    "bench": (
        "lenpred.commands.bench",
        "evaluate heads on a run's test split under its fixed card, relative to the oracle bound",
        "lenpred bench --run data/runs/smollm2-sharegpt --heads out/heads/* --out out/bench",
    ),
    "draft": (
        "lenpred.commands.draft",
        "EAGLE-3 draft heads: train one for a target, inspect or convert a checkpoint",
        "lenpred draft train --run data/runs/smollm2-sharegpt --out out/draft/smollm2",
    ),
    "generate": (
        "lenpred.commands.generate",
        "generate with the target, optionally with an EAGLE-3 draft (speculative decoding)",
        "lenpred generate --draft out/draft/smollm2 --prompt 'Write a haiku about tea.'",
    ),
    "serve": (
        "lenpred.commands.serve",
        "a length-prediction service (FastAPI): POST /v1/predict, /healthz, /metrics",
        "lenpred serve --head data/heads/proxy --port 8100",
    ),
    "route": (
        "lenpred.commands.route",
        "a length-aware OpenAI-compatible router in front of N backends (priority, dispatch, headers)",
        "lenpred route --config router.json",
    ),
    "outlets": (
        "lenpred.commands.outlets",
        "OUTLETS: trajectory features from the draft backbone, remaining-length heads, their bench",
        "lenpred outlets features --run data/runs/smollm2-sharegpt --draft data/draft/smollm2-135m --out out/traj",
    ),
    "report": ("lenpred.commands.report", "one self-contained HTML page of a run's results (card, bound, bench, transfer, OUTLETS, P99 vs load)", "lenpred report --run data/runs/smollm2-sharegpt --bound out/bound/smollm2-sharegpt --out report.html"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lenpred",
        description="Decode-length prediction for LLM serving: collect, bound, predict, simulate.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="verbs and examples:\n"
        + "\n".join(f"  {v:<9} {h}\n            e.g. {ex}" for v, (_, h, ex) in VERBS.items()),
    )
    parser.add_argument("--version", action="version", version=f"lenpred {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, (module, help_, example) in VERBS.items():
        p = sub.add_parser(
            verb,
            help=help_,
            description=help_,
            epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(_module=module)
        # Arguments are added lazily (see main) only for the verb being run, to keep --help fast;
        # `lenpred VERB --help` re-parses with the verb's own arguments.
    return parser


def _verb_parser(verb: str) -> tuple[argparse.ArgumentParser, object]:
    module_name, help_, example = VERBS[verb]
    try:
        mod = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        raise SystemExit(f"lenpred {verb}: error: this verb is not part of this build yet ({module_name} is missing)") from None
    p = argparse.ArgumentParser(
        prog=f"lenpred {verb}",
        description=help_,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mod.add_arguments(p)  # type: ignore[attr-defined]
    return p, mod


def _join_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--shard -1/2`` as ``--shard=-1/2``: argparse takes a value that starts with a dash and is not a
    plain negative number (``-1/2``, ``-1,2``, ``-1e3``) for an option and answers "expected one argument";
    joined, the value reaches the option's own check, which names the valid form."""
    takes_one: set[str] = set()
    parsers = [parser]
    while parsers:  # the verb's own parser and its subcommands' (lenpred outlets features ...)
        for a in parsers.pop()._actions:
            if isinstance(a, argparse._SubParsersAction):
                parsers.extend(a.choices.values())
            elif a.nargs is None and a.option_strings:
                takes_one.update(a.option_strings)
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if a in takes_one and len(nxt) > 1 and nxt[0] == "-" and (nxt[1].isdigit() or nxt[1] == "."):
            out.append(f"{a}={nxt}")
            i += 2
            continue
        if a == "--":
            return out + argv[i:]
        out.append(a)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = build_parser()
    if not argv or argv[0] not in VERBS:
        args = top.parse_args(argv)  # prints help / version / a clear "invalid choice" error
        if args.verb is None:
            top.print_help()
            return 2
    verb, rest = argv[0], argv[1:]
    parser, mod = _verb_parser(verb)
    args = parser.parse_args(_join_dash_values(parser, rest))
    try:
        return int(mod.run(args) or 0)  # type: ignore[attr-defined]
    except LenpredError as err:
        print(f"lenpred {verb}: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `lenpred ... | head` closed the pipe: the reader has what it wanted
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
    except OSError as err:  # the file system said no where no check foresaw it (disk full, a vanished path)
        if err.filename is None or os.environ.get("LENPRED_TRACEBACK"):
            raise
        print(f"lenpred {verb}: error: {err.strerror or err}: {err.filename} -- fix: check the path, its "
              "permissions and the free space (LENPRED_TRACEBACK=1 shows where it happened)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"lenpred {verb}: interrupted (written shards are kept; rerun to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
