"""What ``lenpred demo`` prints: the live run's per-prompt lengths, the reference run's prefill bound, and
the live OUTLETS generation's closing lines (each from the data the library returns)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

__all__ = ["bound_table", "lengths_table", "live_lines"]


def lengths_table(s: Any, prompts: Any, samples: Any, ref_lengths: dict[str, str]) -> Table:
    """One row per live prompt: its lengths (``*``: hit the cap), their mean and sd, and the reference
    run's p10-p50-p90 of the same prompt (``ref_lengths`` by text); ``s`` the collection summary."""
    t = Table(title=f"per-prompt decode lengths ({s.new_tokens} tokens in {s.seconds:.0f} s, {s.tokens_per_s:.1f} tok/s)")
    for col in ("prompt", "prompt tok", "lengths (* = hit the cap)", "mean", "sd", "reference p10-p50-p90"):
        t.add_column(col)
    for p in prompts.itertuples():
        g = samples[samples.prompt_id == p.prompt_id].sort_values("sample_idx")
        lens = g.n_tokens.to_numpy()
        marks = ", ".join(f"{n}{'*' if r == 'length' else ''}" for n, r in zip(lens, g.stop_reason, strict=True))
        short = " ".join(str(p.text).split())[:48]
        t.add_row(short, str(p.n_prompt_tokens), marks, f"{lens.mean():.0f}", f"{lens.std(ddof=1):.0f}" if len(lens) > 1 else "-",
                  ref_lengths.get(str(p.text), "-"))
    return t


def bound_table(s: Any) -> Table:
    """The prefill bound of a run's analysis summary (:func:`lenpred.stats.analyse_run`) and its verdicts."""
    v = s.headline_bound
    lo, hi = v.oracle_mae_ci
    rlo, rhi = v.relative_mae_ci
    t = Table(title=f"prefill bound on the reference run ({v.n_prompts} prompts, {v.n_samples} samples; {v.label})")
    t.add_column("what")
    t.add_column("value")
    t.add_row("oracle MAE: no prompt-only predictor can beat it", f"{v.oracle_mae:.0f} tokens [{lo:.0f}, {hi:.0f}]")
    t.add_row("relative to the mean length", f"{v.relative_mae:.2f} [{rlo:.2f}, {rhi:.2f}]")
    for claim, verdict in s.verdicts.items():
        t.add_row(claim.replace("_", " "), verdict.status)
    return t


def live_lines(r: Any) -> list[str]:
    """A live OUTLETS generation (:class:`lenpred.outlets.live.LiveResult`): its text (cut at 300
    characters), the true length against the predicted totals, and what the length head cost."""
    out = [" ".join(r.text.split())[:300] + (" ..." if len(r.text) > 300 else "")]
    errs = r.errors()
    if r.points:
        first, mid = r.points[0], r.points[len(r.points) // 2]
        cap = " (hit the cap: the answer would have been longer)" if r.stop_reason == "length" else ""
        out.append(f"true length {r.n_tokens}{cap}; predicted total at {first.n_generated} tokens: "
                   f"{first.total:.0f} (error {errs[0]:+.0f}), at {mid.n_generated}: {mid.total:.0f} "
                   f"(error {errs[len(errs) // 2]:+.0f}); tau {r.tau:.2f}")
    if r.head_ms_per_cycle is not None and r.target_ms_per_pass:
        out.append(f"the length head cost {r.head_ms_per_cycle:.2f} ms per cycle = "
                   f"{100 * r.head_ms_per_cycle / r.target_ms_per_pass:.2f}% of a target pass here")
    return out
