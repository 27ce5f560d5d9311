"""The prefill oracle bound: how well could a predictor that sees only the prompt do at best?

For absolute error the best constant prediction for a prompt is the median of its own length
distribution, so the oracle MAE is ``mean_i E|L - median(L | prompt i)|``. With K samples per prompt
it has to be estimated, and the two obvious estimators miss in opposite directions:

* **in-sample**: ``mean_j |L_j - median(L_1..L_K)|``. The sample median minimises this sum, so in
  expectation it is *below* the oracle (optimistic; at K = 8 by ~9% for normal lengths).
* **leave-one-out (LOO)**: ``mean_j |L_j - median(L_-j)|``. The held-out sample is independent of the
  median it is compared with, and no fixed value does better than the true median, so in expectation
  it is *above* the oracle (pessimistic; at K = 8 by ~10%): it is the error of an oracle that saw
  only K - 1 samples, a real predictor's error.

So ``E[in-sample] <= oracle <= E[LOO]`` holds for any length law. The point estimate is their
geometric mean per prompt. The reason: for errors about the *mean*, the two biases are exactly
reciprocal under normality (factors sqrt((K-1)/K) and sqrt(K/(K-1))), so the geometric mean is
unbiased; for the median we checked by simulation (table in docs/bound.md) that it stays within 1%
of the truth at K = 8 for normal, uniform, exponential, geometric, log-normal and Poisson lengths
(within 3% at K = 4; exact in expectation for normal lengths at K = 2) and 3.4% low for a strongly
bimodal law at K = 8, while its variance is lower than LOO's. A Richardson extrapolation of the
held-out error over the subsample size was the alternative; it was less accurate and 1.5-2x noisier
at K = 8.

For squared error the oracle is the per-prompt mean and its error the per-prompt variance; the
unbiased sample variance (ddof = 1) estimates that exactly, so no correction is needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lenpred.data.lengths import loo_median_sorted
from lenpred.stats.bootstrap import mean_ci, ratio_ci
from lenpred.stats.results import ByK, KRange, VariantBound


def mae_estimates(x: np.ndarray) -> dict[str, np.ndarray]:
    """Per-prompt oracle-MAE estimates from x: (M, P, K) lengths; returns (P,) arrays.

    ``mae_*`` are absolute errors (tokens); ``rel_*`` are the relative forms mean_j |L_j - m| / L_j.
    """
    k = x.shape[-1]
    if k < 2:
        raise ValueError("the bound needs at least 2 samples per prompt")
    s = np.sort(x, axis=-1)  # (M, P, K)
    med = np.median(s, axis=-1, keepdims=True)
    loo_med = loo_median_sorted(s)  # (M, P, K): median of the others, for each sample
    # a zero-length response would divide by zero; one token is the smallest meaningful length
    denom = np.maximum(s, 1.0)
    ins = np.abs(s - med)
    loo = np.abs(s - loo_med)
    out = {
        "mae_insample": ins.mean(-1),
        "mae_loo": loo.mean(-1),
        "rel_insample": (ins / denom).mean(-1),
        "rel_loo": (loo / denom).mean(-1),
    }
    out["mae_oracle"] = np.sqrt(out["mae_insample"] * out["mae_loo"])
    out["rel_oracle"] = np.sqrt(out["rel_insample"] * out["rel_loo"])
    return {name: v.mean(0) for name, v in out.items()}  # average over imputations


def summarize_bound(
    per_prompt: pd.DataFrame,
    n_boot: int,
    ci: float,
    rng: np.random.Generator,
    *,
    label: str,
    dropped: dict[str, int],
    imputed: int,
) -> VariantBound:
    """Aggregate the per-prompt estimates into the bound, with bootstrap intervals over prompts.

    Every prompt weighs the same (the bound is an average over prompts, as a benchmark of prompts is).
    ``label``, ``dropped`` (prompts left out, by reason) and ``imputed`` (censored samples imputed)
    describe the variant the table came from.
    """
    pp = per_prompt
    mae = pp["mae_oracle"].to_numpy(float)
    mean_len = pp["mean"].to_numpy(float)
    var = pp["var"].to_numpy(float)
    rel = pp["rel_oracle"].to_numpy(float)
    # the order of the bootstrap draws below is part of the figures (one generator for the analysis)
    mse_ci = mean_ci(var, n_boot, ci, rng)
    fields: dict[str, Any] = {
        "n_prompts": len(pp),
        "n_samples": int(pp["k"].sum()),
        "samples_per_prompt": KRange(
            min=int(pp["k"].min()), median=float(pp["k"].median()), max=int(pp["k"].max())
        ),
        "mean_length": float(mean_len.mean()),
        "median_length": float(pp["median"].mean()),
        "oracle_mae": float(mae.mean()),
        "oracle_mae_ci": mean_ci(mae, n_boot, ci, rng),
        "oracle_mae_insample": float(pp["mae_insample"].mean()),
        "oracle_mae_loo": float(pp["mae_loo"].mean()),
        "oracle_mae_loo_ci": mean_ci(pp["mae_loo"].to_numpy(float), n_boot, ci, rng),
        "relative_mae": float(mae.sum() / mean_len.sum()),
        "relative_mae_ci": ratio_ci(mae, mean_len, n_boot, ci, rng),
        "mean_relative_error": float(rel.mean()),
        "mean_relative_error_ci": mean_ci(rel, n_boot, ci, rng),
        "mean_relative_error_loo": float(pp["rel_loo"].mean()),
        "oracle_mse": float(var.mean()),
        "oracle_mse_ci": mse_ci,
        "oracle_rmse": float(np.sqrt(var.mean())),
        "oracle_rmse_ci": (float(np.sqrt(mse_ci[0])), float(np.sqrt(mse_ci[1]))),
        "ci_level": ci,
    }
    if pp["k"].nunique() > 1:
        # prompts with more samples have sharper per-prompt estimates; agreement across K is a check that
        # the finite-K correction works on this run (the prompt sets differ, so only roughly)
        fields["by_k"] = {
            str(int(k)): ByK(
                n_prompts=len(g), oracle_mae=float(g["mae_oracle"].mean()), mean_length=float(g["mean"].mean())
            )
            for k, g in pp.groupby("k")
        }
    return VariantBound(label=label, dropped_prompts=dropped, imputed_samples=imputed, **fields)
