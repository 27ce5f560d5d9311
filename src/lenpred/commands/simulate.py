"""`lenpred simulate`: run a simulator config (loads x policies), print the table, write JSON + plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lenpred.config import add_arguments as add_config_arguments
from lenpred.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="simulator config (JSON; see experiments/sim/*.json)")
    p.add_argument("--out", default=None, help="output folder (default out/sim/<config name>)")
    p.add_argument("--requests", default=None,
                   help="a request table (CSV/Parquet/JSONL with arrival_s, prompt_tokens, output_tokens "
                        "[, predicted_tokens, predicted_spread, repredictions]) to replay instead of the "
                        "config's workload, at its own arrival times unless --loads is given (req/s, or "
                        "the config's sweep.load_unit)")
    p.add_argument("--predictions", default=None, metavar="PARQUET",
                   help="a predictions table (lenpred predict, or Predictions.write) for every arm without "
                        "its own prediction: joined to a run-directory workload by (prompt_id, sample_idx); "
                        "for other workloads prompt_id is the request id (row from 0) and sample_idx 0")
    p.add_argument("--loads", default=None, help="comma-separated loads overriding sweep.loads")
    # overrides of single config fields: flags derived from the fields (None = keep the config's)
    from lenpred.sim.config import SimConfig, WorkloadConfig

    add_config_arguments(p, SimConfig, only=("seed", "plots"), defaults={"seed": None, "plots": None})
    add_config_arguments(p, WorkloadConfig, only=("n_requests",), defaults={"n_requests": None})
    p.add_argument("--quiet", action="store_true", help="no per-run progress lines")
    p.add_argument("--list", action="store_true", help="list profiles, queue policies, dispatchers and exit")
    p.add_argument("--fit-profile", default=None, metavar="CSV",
                   help="fit a latency profile to measured step timings (columns: kind [prefill|decode], "
                        "seconds, and lengths (JSON list) or tokens + tokens_sq for prefill, batch + context "
                        "for decode); writes OUT (a .json path) or OUT/<csv name>.json, usable as cluster.profile")
    p.add_argument("--base-profile", default="llama8b-h100",
                   help="profile whose KV size and batch limits a fitted profile keeps (default llama8b-h100)")


def _list() -> int:
    from lenpred.report.sim import catalogue_lines

    print("\n".join(catalogue_lines()))
    return 0


def build_config(args: argparse.Namespace) -> Any:
    """The config file with the command-line overrides applied (validated)."""
    from lenpred.sim.config import SimConfig, parse_loads

    if not args.config:
        if not args.requests:
            raise ConfigError("no config given", "pass --config FILE (e.g. experiments/sim/reproduction.json)")
        cfg = SimConfig(name=Path(args.requests).stem)
    else:
        cfg = SimConfig.load(args.config)
    if args.seed is not None:
        cfg = cfg.replace(seed=args.seed)
    if args.plots is not None:
        cfg = cfg.replace(plots=args.plots)
    if args.n_requests is not None:
        cfg = cfg.nested("workload", n_requests=args.n_requests)
    if args.loads is not None:
        loads, unit = parse_loads(args.loads, cfg.sweep.load_unit)
        cfg = cfg.nested("sweep", loads=loads, load_unit=unit)
    if args.predictions is not None:
        from lenpred.sim.config import PredictionConfig
        from lenpred.sim.sweep import with_default_policy

        cfg = with_default_policy(cfg.replace(prediction=PredictionConfig(model="table", path=args.predictions)), True)
    return cfg


def _fit(args: argparse.Namespace) -> int:
    import json

    from lenpred.io.artifacts import check_out
    from lenpred.io.fileio import atomic_write_bytes
    from lenpred.report.sim import profile_lines
    from lenpred.sim.profiles import fit_profile, read_timings

    path = Path(args.fit_profile)
    out = Path(args.out) if args.out else Path("out") / "sim" / "profiles"
    dest = out if out.suffix == ".json" else out / f"{path.stem}.json"
    check_out(dest, kind="profile", inputs={"--fit-profile": path})
    rows = read_timings(path)
    prof = fit_profile(rows, name=path.stem, base=args.base_profile)
    atomic_write_bytes(dest, (json.dumps(prof.describe(), indent=2) + "\n").encode())
    print("\n".join(profile_lines(prof, dest)))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    if args.fit_profile:
        return _fit(args)
    from lenpred.io.artifacts import check_out
    from lenpred.report.sim import KIND, print_table, result_lines, write_sim
    from lenpred.sim.sweep import replay_config, run_sweep

    cfg = build_config(args)
    out = Path(args.out) if args.out else Path("out") / "sim" / cfg.name
    check_out(out, kind=KIND, inputs={"--config": args.config, "--requests": args.requests,
                                      "--predictions": args.predictions})
    workload = None
    if args.requests:
        # the table's own arrival times, unless --loads asks for loads explicitly
        cfg, workload = replay_config(cfg, args.requests, loads_given=args.loads is not None)
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    res = run_sweep(cfg, progress=say, workload=workload)
    art = write_sim(res, print_table(res), out)
    print("\n".join(result_lines(res, art, out)))
    return 0
