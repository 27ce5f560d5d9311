"""The router's tables of docs/results.md (:mod:`results_page`): its overhead before and after each fix,
and the A/B runs on two llama.cpp servers."""

from __future__ import annotations

import re
import statistics
from typing import Any

from benchmarks.report.results_figures import count, made, pct, rng, table

# the router's overhead before and after each fix (two runs each), by the files' prefix, with the table's row
# names: "" the relay fix (commit 69b5b9c, the first machine), "fastpath-" the completion routes past FastAPI's
# middlewares (commit 3ab8c6c, the second machine)
OVERHEAD_FIXES = {"": ("before the fix", "after the fix"), "fastpath-": ("before", "after")}
AB_RUNS = 6  # the A/B runs of the router on two llama.cpp servers: docs/results/router/ab-run1..N.json

def _overhead_file(fix: str, when: str, i: int) -> str:
    """An overhead run's figure file under docs/results/ (``fix``: a key of OVERHEAD_FIXES)."""
    return f"router/overhead-{fix}{when}-{i}.json"


def _overhead_source(fix: str, when: str, i: int) -> str:
    """Its name in SOURCES (router_overhead_after_1, router_overhead_fastpath_before_2, ...)."""
    return f"router_overhead_{fix.replace('-', '_')}{when}_{i}"


# the figure files, by the name the template knows them under: (path from the root, what writes it)

# --------------------------------------------------------------------------------------------- the router
SPREAD_LIMIT = 0.05  # bench_router.py ab warns above this spread of the servers' speed between arms


def _goal_ms(goal: str) -> float:
    """The overhead goal's bound from its text ("p99 added latency under 5 ms")."""
    m = re.search(r"under ([0-9.]+) ms", goal)
    if m is None:
        raise ValueError(f"goal {goal!r} names no 'under N ms'")
    return float(m.group(1))


def _arm_label(arm: str) -> str:
    """bench_router.py ab's arm names as the page says them."""
    again = arm.endswith("-again")
    base = arm.removesuffix("-again")
    if base == "round-robin":
        label = "round robin"
    elif base.startswith("recommended-"):
        label = f"recommended ({base.removeprefix('recommended-')})"
    elif base.startswith("lpt-"):
        label = f"least predicted tokens, {base.removeprefix('lpt-')}"
    else:
        label = base
    return label + (" again" if again else "")


def _policy_arms(arms: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The arms that run a policy against round robin: the router's default with its queue in front of the
    slots (recommended-HEAD) or with every request sent on at once (lpt-HEAD)."""
    return [(a, f) for a, f in arms.items() if a.startswith(("recommended-", "lpt-"))]


def _ab_flags(d: dict[str, Any]) -> str:
    """The run's command-line flags that shaped it, from the arguments it recorded."""
    a = d.get("args") or {}
    flags = [f"--requests {d['requests']}", f"--rate {d['rate_rps']:g}", f"--arms {a.get('arms', 'rr,lpt')}"]
    if a.get("seed"):
        flags.append(f"--seed {a['seed']}")
    flags += [f"--{k.replace('_', '-')}" for k in ("repeat_first", "same_estimator") if a.get(k)]
    if (a.get("blocks") or 1) > 1:
        flags.append(f"--blocks {a['blocks']}")
    if a.get("slots", 1) != 1 and "recommended" in a.get("arms", ""):
        flags.append(f"--slots {a['slots']}")
    return " ".join(flags)


def _ab_desc(d: dict[str, Any]) -> str:
    """What a run did differently, from the arguments it recorded."""
    a = d.get("args") or {}
    out = []
    if a.get("same_estimator"):
        out.append("`--same-estimator` (round robin asks the proxy head too, so every arm pays its CPU)")
    if (a.get("blocks") or 1) > 1:
        order = " ".join("A" if arm == "round-robin" else "B" for _, arm in d["blocks"]["order"])
        out.append(f"`--blocks {a['blocks']}`: {d['requests'] // a['blocks']} requests per block, every arm on "
                   f"every block, arms in the order {order} (A round robin): the machine's drift falls on both")
    elif a.get("repeat_first"):
        out.append("A-B-A (round robin again at the end)")
    return "; ".join(out)


def _ab_run(d: dict[str, Any]) -> dict[str, Any]:
    """One A/B run: its table, and the reading computed from it (the policy arm against the mean of
    the round-robin runs; whether the servers ran at one speed in every arm)."""
    arms = d["arms"]

    def sec(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f} s"

    rows = []
    for arm, f in arms.items():
        busy = (f.get("utilization") or {}).get("mean")
        rows.append([_arm_label(arm), "-" if busy is None else f"{busy:.2f}",
                     "-" if f["decode_tok_s_median"] is None else f"{f['decode_tok_s_median']:.1f} tok/s",
                     sec(f["short_p50_e2e_s"]), f"**{sec(f['short_p99_e2e_s'])}**", sec(f["p99_e2e_s"]),
                     sec(f["mean_e2e_s"])])
    t = table(["arm", "busy share", "servers' speed", "short P50", "**short P99**", "P99 e2e", "mean e2e"], rows)
    rr = [f for a, f in arms.items() if a.removesuffix("-again") == "round-robin"]
    rec = _policy_arms(arms)
    reading = []
    if rr and rec:
        rr_short = statistics.fmean(f["short_p99_e2e_s"] for f in rr)
        rr_p99 = statistics.fmean(f["p99_e2e_s"] for f in rr)
        against = ("round robin's" if len(rr) == 1 else
                   f"the mean of the {({2: 'two', 3: 'three'}).get(len(rr), str(len(rr)))} round-robin runs")
        for a, f in rec:
            reading.append(f"The {_arm_label(a)} arm: short P99 {f['short_p99_e2e_s']:.1f} s against {rr_short:.1f} s, "
                           f"{against} (**{pct(f['short_p99_e2e_s'] / rr_short - 1)}**); "
                           f"P99 e2e {pct(f['p99_e2e_s'] / rr_p99 - 1)}, mean e2e "
                           f"{pct(f['mean_e2e_s'] / statistics.fmean(x['mean_e2e_s'] for x in rr) - 1)}.")
        if len(rr) > 1:
            s = [f["short_p99_e2e_s"] for f in rr]
            reading.append(f"The round-robin runs' short P99 differ by {100 * (max(s) / min(s) - 1):.0f}% among "
                           "themselves.")
    blocks = d.get("blocks")
    if blocks and rec:
        per = blocks["short_p99_per_block"]
        a = rec[0][0]
        won = blocks["blocks_won_vs_first_arm"].get(a)
        reading.append(f"Per block, short P99 round robin {', '.join(sec(x) for x in per['round-robin'])}; "
                       f"{_arm_label(a)} {', '.join(sec(x) for x in per[a])} (lower in {won} of {len(per[a])} "
                       "blocks).")
    lost = [f"{f['requests'] - f['ok']} of {f['requests']} requests in the {_arm_label(a)} arm" for a, f in arms.items()
            if f["ok"] < f["requests"]]
    if lost:
        reading.append(f"Not completed (left out of the figures): {', '.join(lost)}.")
    spread = d.get("server_speed_spread")
    if spread is None:
        comparable = "The servers' speed was not measured in every arm: comparability unknown."
    elif spread > SPREAD_LIMIT:
        comparable = (f"**The arms are not comparable**: the servers' speed differed by {100 * spread:.1f}% between "
                      f"arms (over {100 * SPREAD_LIMIT:.0f}%)")
        speeds = {a: f["decode_tok_s_median"] for a, f in arms.items() if f["decode_tok_s_median"]}
        if rec and speeds and rr:
            a, f = rec[0]
            rr_speed = statistics.fmean(x["decode_tok_s_median"] for x in rr)
            rank = ("the slowest" if speeds[a] == min(speeds.values()) else
                    "the fastest" if speeds[a] == max(speeds.values()) else "neither the slowest nor the fastest")
            comparable += (f"; the servers were {rank} in the {_arm_label(a)} arm, {pct(speeds[a] / rr_speed - 1)} "
                           "against the round-robin mean")
        comparable += "."
    else:
        comparable = (f"The servers' speed differed by {100 * spread:.1f}% between arms (within "
                      f"{100 * SPREAD_LIMIT:.0f}%): the arms are comparable.")
    if blocks and blocks.get("neighbour_speed_gap") is not None:
        comparable += (f" Between the two arms of one block the servers' speed differed by up to "
                       f"{100 * blocks['neighbour_speed_gap']:.0f}% (the drift the interleaving spreads over both).")
    rec_vs_rr = None  # the policy arm's servers' speed against the round-robin mean
    if rec and rr and all(f["decode_tok_s_median"] for f in arms.values()):
        rec_vs_rr = rec[0][1]["decode_tok_s_median"] / statistics.fmean(x["decode_tok_s_median"] for x in rr) - 1
    return {"table": t, "reading": " ".join(reading) or "-", "comparable": comparable,
            "rec_vs_rr": rec_vs_rr, "desc": _ab_desc(d),
            "load": f"{d['load_vs_decode_capacity']:.2f}", "short": f"{d['short_threshold_tokens']:g}",
            "busy_missing": all((f.get("utilization") or {}).get("mean") is None for f in arms.values())}


def _overhead(before: list[dict[str, Any]], after: list[dict[str, Any]], names: tuple[str, str]) -> dict[str, Any]:
    """One fix's overhead table (two runs before, two after) and the goal's verdicts."""
    def added(d: dict[str, Any], k: str, p50: str) -> str:
        o = d["overhead_ms"][k]
        return f"{o['p50']:+{p50}} / {o['p99']:+.1f} ms"

    runs = [(f"{names[0]}, {i}", d) for i, d in enumerate(before, 1)] + \
           [(f"**{names[1]}, {i}**", d) for i, d in enumerate(after, 1)]
    t = table(["run", "first token added p50 / p99", "per chunk added p50 / p99", "router CPU / request"],
              [[name, added(d, "first_token", ".1f"), added(d, "per_chunk", ".2f"), f"{d['router_cpu_ms_per_request']:.2f} ms"]
               for name, d in runs])
    goal = _goal_ms(after[0]["goal"])

    def verdict(kind: str, ds: list[dict[str, Any]]) -> str:
        p99 = [d["overhead_ms"][kind]["p99"] for d in ds]
        met = all(x < goal for x in p99)
        return f"{'met' if met else 'not met'} ({rng(p99, '+.1f', ' to ')} ms)"

    cpu = [d["router_cpu_ms_per_request"] for d in before], [d["router_cpu_ms_per_request"] for d in after]
    return {"table": t, "first_after": verdict("first_token", after), "chunk_after": verdict("per_chunk", after),
            "first_before": verdict("first_token", before), "chunk_before": verdict("per_chunk", before),
            "cpu_change": pct(statistics.fmean(cpu[1]) / statistics.fmean(cpu[0]) - 1),
            "cpu_model": (after[0].get("machine") or {}).get("cpu_model")}


def router_figures(manifest: dict[str, Any], *files: dict[str, Any]) -> dict[str, Any]:
    """The router (bench_router.py): added latency and CPU before and after each fix (overhead, four files per
    fix in OVERHEAD_FIXES order), and the A/B runs on two llama.cpp servers, one entry of ``ab`` per run."""
    n = 4 * len(OVERHEAD_FIXES)
    fixes, ab_runs = files[:n], files[n:]

    def span(fix: str) -> str:
        m = sorted(made(manifest, _overhead_file(fix, w, i)) for w in ("before", "after") for i in (1, 2))
        return f"{m[0][:16]}-{m[-1][11:]}" if m[0][:10] == m[-1][:10] else f"{m[0]} to {m[-1]}"  # "DAY HH:MM-HH:MM UTC"

    # four files per fix, in OVERHEAD_FIXES' order: before 1, before 2, after 1, after 2
    ov = {fix: {**_overhead(list(fixes[4 * k:4 * k + 2]), list(fixes[4 * k + 2:4 * k + 4]), names), "made": span(fix)}
          for k, (fix, names) in enumerate(OVERHEAD_FIXES.items())}
    relay, after1 = ov[""], fixes[2]

    ab = [{**_ab_run(d), "made": made(manifest, f"router/ab-run{i}.json"), "flags": _ab_flags(d)}
          for i, d in enumerate(ab_runs, 1)]
    speeds = [r["rec_vs_rr"] for r in ab]
    return {
        "overhead": relay["table"], "goal": after1["goal"], "goal_ms": f"{_goal_ms(after1['goal']):g}",
        "first_after": relay["first_after"], "chunk_after": relay["chunk_after"],
        "first_before": relay["first_before"], "chunk_before": relay["chunk_before"],
        "fast": ov["fastpath-"],
        "streams": after1["streams"], "rounds": after1["rounds"], "measured": count(after1["router"]["requests"]),
        "tokens": after1["tokens"], "tok_s": f"{after1['tokens_per_s']:g}",
        "router_core": ",".join(map(str, (after1["placement"] or {}).get("router", []))) or "-",
        "made": relay["made"],
        "ab": ab,
        # runs 1-3 (the router's queue in front of one slot): the policy arm's servers' speed against round robin's
        "rec_speed_first3": ", ".join("-" if r is None else pct(r) for r in speeds[:3]),
    }
