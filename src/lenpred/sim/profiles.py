"""Latency profiles: how long a prefill batch and a decode step take on one serving instance.

The functional form is DistServe's (Zhong et al., OSDI'24, ``simdistserve/estimators``)::

    prefill batch  t = a + b * sum(tokens) + c * sum(tokens**2)       # quadratic term: attention
    decode step    t = a + b * sum(context) + c * batch               # context: KV entries read

All coefficients are stored in **seconds** (per token, per token squared, per request). A profile
also carries what the engine needs about memory: KV bytes per token (KV transfer and swap cost) and
the KV capacity of one instance in tokens (admission and preemption).

Profiles:

* ``distserve-opt13b``: DistServe's simulator model of OPT-13B, TP=1, on an A100-80GB: their
  profiler fit as re-aligned on 2024-05-01, plus the fixed per-step overheads their simulator adds
  (converted from milliseconds; see the block below).
* ``llama8b-h100`` / ``llama8b-h100-fp8``: Llama-3.1-8B on one H100-SXM derived from first
  principles by :func:`derive_profile` (bytes over HBM bandwidth, FLOPs over tensor-core rate, with
  the numbers written below). The FP8 variant exists to check the derivation against NVIDIA's
  published TensorRT-LLM throughput (``experiments/sim/check_llama8b_profile.py``, ``docs/sim.md``).

:func:`fit_profile` fits the same coefficients from measured timings by least squares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from lenpred.errors import ConfigError, DataError
from lenpred.registry import Registry

Coeffs = tuple[float, float, float]


@dataclass(frozen=True)
class LatencyProfile:
    """Step-time model of one instance (one GPU or one TP group). Times in seconds."""

    name: str
    prefill: Coeffs  # (a [s], b [s/token], c [s/token^2])
    decode: Coeffs  # (a [s], b [s/context token], c [s/request])
    kv_bytes_per_token: int  # K and V over all layers, bytes per token
    kv_capacity_tokens: int  # KV slots one instance holds
    max_batch: int = 256  # running sequences per decode step (vLLM's max_num_seqs default)
    max_prefill_tokens: int = 8192  # tokens per prefill batch (vLLM's max_num_batched_tokens)
    decode_large: Coeffs | None = None  # optional second regime for batch >= large_batch_threshold
    large_batch_threshold: int = 0
    source: str = ""  # where the numbers come from (citation or derivation)

    def __post_init__(self) -> None:
        for label, co in (("prefill", self.prefill), ("decode", self.decode)):
            if len(co) != 3 or not all(math.isfinite(x) for x in co):
                raise ConfigError(f"profile {self.name!r}: {label} needs 3 finite coefficients, got {co}",
                                  f"give {label} as [c0, c1, c2] (seconds = c0 + c1 tokens + c2 tokens^2)")
        if self.kv_bytes_per_token <= 0 or self.kv_capacity_tokens <= 0:
            raise ConfigError(f"profile {self.name!r}: KV bytes per token and capacity must be positive",
                              "set kv_bytes_per_token and kv_capacity_tokens to positive numbers")
        if self.max_batch <= 0 or self.max_prefill_tokens <= 0:
            raise ConfigError(f"profile {self.name!r}: max_batch and max_prefill_tokens must be positive",
                              "set max_batch and max_prefill_tokens to 1 or more")

    def prefill_time(self, lengths: Sequence[int]) -> float:
        """Seconds for one prefill batch of sequences with these token counts."""
        a, b, c = self.prefill
        s1 = 0
        s2 = 0
        for n in lengths:
            s1 += n
            s2 += n * n
        return a + b * s1 + c * s2

    def decode_time(self, batch: int, context: int) -> float:
        """Seconds for one decode step over ``batch`` sequences holding ``context`` KV entries in all."""
        a, b, c = self.decode
        if self.decode_large is not None and batch >= self.large_batch_threshold:
            a, b, c = self.decode_large
        return a + b * context + c * batch

    def with_overrides(self, **kw: Any) -> LatencyProfile:
        """A copy with some fields replaced (``None`` values are ignored)."""
        kw = {k: v for k, v in kw.items() if v is not None}
        return replace(self, **kw) if kw else self

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "prefill_s": list(self.prefill),
            "decode_s": list(self.decode),
            "decode_large_s": list(self.decode_large) if self.decode_large else None,
            "large_batch_threshold": self.large_batch_threshold,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "max_batch": self.max_batch,
            "max_prefill_tokens": self.max_prefill_tokens,
            "source": self.source,
        }


PROFILES: Registry[LatencyProfile] = Registry("latency profile")


# ---------------------------------------------------------------- DistServe OPT-13B
# Source: LLMServe/DistServe at commit 82831f1 (2025-04-06), simdistserve/. Values there are ms.
# * Fit: estimators/profile_data/profiler-a100-80g.distserve.json, "facebook/opt-13b", TP "1", as
#   changed by commit 4c68ed9 "Realign the curve" (2024-05-01), which folded the x1.1 that
#   time_estimator.get_prefill_time used to apply into the stored prefill values (decode unchanged).
# * Overheads in the same simulator, on top of the fit (PP = 1):
#   - base/worker.py Worker.add_ray_overhead: 2 ms + 1e-4 ms x the sum of the batch's context
#     lengths, added to every prefill batch and every decode step;
#   - estimators/time_estimator.get_prefill_time: pp_const = 1 ms per prefill batch.
#   Context there is prompt + tokens decoded so far, without the prefill's token, while the fit's
#   decode term reads prompt + decoded + 1, which is our context (KV entries, the prefill token
#   included); so the overhead's per-context term is 1e-4 x (context - batch) in our terms.
# * KV capacity: estimators/profile_data/max_num_tokens.csv (opt-13b, tp=1, pp=1: 66144 tokens).
#   OPT-13B: 40 layers, hidden 5120, fp16 KV.
_MS = 1e-3
_DS_PREFILL = (18.10254647486372, 0.1019122572698738, 7.122264314252114e-06)
_DS_DECODE_SMALL = (19.934702624895458, 0.0006269356524350583, 0.03850697740828398)
_DS_DECODE_LARGE = (7.1661889468253595, 0.0005798000403396046, 0.15831096191764046)
_DS_STEP_MS, _DS_CONTEXT_MS, _DS_PREFILL_MS = 2.0, 1e-4, 1.0


def _ds_prefill(a: float, b: float, c: float) -> Coeffs:
    return ((a + _DS_PREFILL_MS + _DS_STEP_MS) * _MS, (b + _DS_CONTEXT_MS) * _MS, c * _MS)


def _ds_decode(a: float, b: float, c: float) -> Coeffs:
    return ((a + _DS_STEP_MS) * _MS, (b + _DS_CONTEXT_MS) * _MS, (c - _DS_CONTEXT_MS) * _MS)


PROFILES.add(
    "distserve-opt13b",
    LatencyProfile(
        name="distserve-opt13b",
        prefill=_ds_prefill(*_DS_PREFILL),
        decode=_ds_decode(*_DS_DECODE_SMALL),
        decode_large=_ds_decode(*_DS_DECODE_LARGE),
        large_batch_threshold=95,
        kv_bytes_per_token=2 * 40 * 5120 * 2,  # K,V x layers x hidden x fp16 = 819,200 B
        kv_capacity_tokens=66144,
        max_batch=256,
        max_prefill_tokens=8192,
        source=("LLMServe/DistServe simdistserve @82831f1: profiler-a100-80g.distserve.json facebook/opt-13b "
                "TP=1 (A100-80GB) as re-aligned by 4c68ed9 'Realign the curve' (2024-05-01), plus the "
                "simulator's overheads: 2 ms + 1e-4 ms/context token per step (add_ray_overhead), "
                "1 ms per prefill (pp_const)"),
    ),
)


# ---------------------------------------------------------------- first-principles derivation
@dataclass(frozen=True)
class ModelShape:
    """What the roofline needs to know about a decoder-only transformer."""

    name: str
    n_params: float  # parameters touched per token (weights streamed once per step)
    n_layers: int
    d_attn: int  # n_heads * head_dim (width of Q and of the attention output)
    n_kv_heads: int
    head_dim: int
    weight_bytes: float  # bytes per parameter (2 = bf16, 1 = fp8)
    kv_bytes: float  # bytes per KV element


@dataclass(frozen=True)
class GpuSpec:
    name: str
    hbm_bytes: float  # device memory
    hbm_bw: float  # bytes/s, datasheet
    matmul_flops: float  # dense FLOP/s at the weight precision, datasheet
    mem_eff: float = 0.8  # fraction of datasheet bandwidth that decode GEMV/attention kernels reach
    compute_eff: float = 0.7  # fraction of datasheet FLOP/s that large prefill GEMMs reach
    mem_fraction: float = 0.9  # share of memory the engine may use (vLLM gpu_memory_utilization)
    reserve_bytes: float = 2e9  # activations, CUDA graphs, workspace


LLAMA31_8B_BF16 = ModelShape(
    name="Llama-3.1-8B", n_params=8.03e9, n_layers=32, d_attn=4096, n_kv_heads=8, head_dim=128,
    weight_bytes=2.0, kv_bytes=2.0,
)
LLAMA31_8B_FP8 = replace(LLAMA31_8B_BF16, weight_bytes=1.0, kv_bytes=1.0)
# H100 SXM5 80GB datasheet: HBM3 3.35 TB/s; dense BF16 989.4 TFLOP/s, dense FP8 1978.9 TFLOP/s;
# 80 GiB of device memory (nvidia-smi reports 81,559 MiB).
H100_SXM_BF16 = GpuSpec(name="H100-SXM", hbm_bytes=80 * 2**30, hbm_bw=3.35e12, matmul_flops=989.4e12)
H100_SXM_FP8 = replace(H100_SXM_BF16, matmul_flops=1978.9e12, mem_fraction=0.95)


def derive_profile(
    model: ModelShape, gpu: GpuSpec, *, name: str, max_batch: int = 256, max_prefill_tokens: int = 8192
) -> LatencyProfile:
    """A DistServe-form profile from bytes over bandwidth and FLOPs over tensor rate.

    decode step (memory bound, summed rather than overlapped: a slight over-estimate near the ridge):
      a = weight bytes / (eff_m * BW)              every step streams all weights once
      b = KV bytes per token / (eff_m * BW)        every context token's K and V are read once
      c = 2 * n_params / (eff_c * FLOPs)           the matmul work each sequence adds
    prefill batch (compute bound):
      a = weight bytes / (eff_m * BW)              the floor for a tiny batch
      b = 2 * n_params / (eff_c * FLOPs)           GEMM FLOPs per token
      c = 2 * n_layers * d_attn / (eff_c * FLOPs)  causal attention: QK^T and AV, 4*s^2*d halved
    KV capacity = (mem_fraction * HBM - weights - reserve) / KV bytes per token.
    """
    bw = gpu.mem_eff * gpu.hbm_bw
    fl = gpu.compute_eff * gpu.matmul_flops
    weights = model.n_params * model.weight_bytes
    kv_per_token = int(round(2 * model.n_layers * model.n_kv_heads * model.head_dim * model.kv_bytes))
    free = gpu.mem_fraction * gpu.hbm_bytes - weights - gpu.reserve_bytes
    if free <= kv_per_token:
        raise ConfigError(f"{model.name} does not fit on {gpu.name} with room for KV cache",
                          "use a GPU with more memory, or a smaller model")
    return LatencyProfile(
        name=name,
        prefill=(weights / bw, 2 * model.n_params / fl, 2 * model.n_layers * model.d_attn / fl),
        decode=(weights / bw, kv_per_token / bw, 2 * model.n_params / fl),
        kv_bytes_per_token=kv_per_token,
        kv_capacity_tokens=int(free // kv_per_token),
        max_batch=max_batch,
        max_prefill_tokens=max_prefill_tokens,
        source=(
            f"derived: {model.name} ({model.n_params / 1e9:.2f}B params, {model.weight_bytes:g} B/param, "
            f"KV {kv_per_token} B/token) on {gpu.name} ({gpu.hbm_bw / 1e12:.2f} TB/s x {gpu.mem_eff}, "
            f"{gpu.matmul_flops / 1e12:.0f} TFLOP/s x {gpu.compute_eff})"
        ),
    )


# Llama-3.1-8B BF16 on H100-SXM (eff_m 0.8, eff_c 0.7):
#   weights 16.06 GB / 2.68 TB/s = 5.99 ms; KV 131,072 B/token -> 48.9 ns per context token;
#   16.06 GFLOP/token / 692.6 TFLOP/s = 23.2 us per sequence; attention 262,144 FLOP/token^2 ->
#   0.38 ns/token^2; KV capacity (0.9 * 85.9 GB - 16.06 - 2) / 131,072 ~ 452k tokens.
PROFILES.add("llama8b-h100", derive_profile(LLAMA31_8B_BF16, H100_SXM_BF16, name="llama8b-h100"))
# FP8 weights, FP8 KV, FP8 tensor cores: the configuration NVIDIA publishes TensorRT-LLM numbers for.
PROFILES.add(
    "llama8b-h100-fp8",
    derive_profile(LLAMA31_8B_FP8, H100_SXM_FP8, name="llama8b-h100-fp8", max_batch=2048),
)


def profile_from_dict(d: Mapping[str, Any]) -> LatencyProfile:
    """Inverse of :meth:`LatencyProfile.describe` (e.g. a fitted profile saved as JSON)."""
    try:
        large = d.get("decode_large_s")
        return LatencyProfile(
            name=str(d["name"]),
            prefill=tuple(float(x) for x in d["prefill_s"]),  # type: ignore[arg-type]
            decode=tuple(float(x) for x in d["decode_s"]),  # type: ignore[arg-type]
            decode_large=tuple(float(x) for x in large) if large else None,  # type: ignore[arg-type]
            large_batch_threshold=int(d.get("large_batch_threshold", 0)),
            kv_bytes_per_token=int(d["kv_bytes_per_token"]),
            kv_capacity_tokens=int(d["kv_capacity_tokens"]),
            max_batch=int(d.get("max_batch", 256)),
            max_prefill_tokens=int(d.get("max_prefill_tokens", 8192)),
            source=str(d.get("source", "")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"profile JSON is missing or has a bad field ({e})",
                          "write it with LatencyProfile.describe() / `lenpred simulate --fit-profile`") from e


def get_profile(name: str) -> LatencyProfile:
    """Look a profile up by name, or load it from a ``.json`` file written by :meth:`describe`
    (raises UnknownKeyError listing the valid names)."""
    if name.endswith(".json"):
        import json

        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"profile file {path} not found", f"use a file or one of: {', '.join(PROFILES)}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"profile file {path} is not valid JSON ({e})", "correct the JSON at that place") from e
        return profile_from_dict(data)
    return PROFILES.get(name)


# ---------------------------------------------------------------- fitting from timings
@dataclass(frozen=True)
class Timing:
    """One measured step. Prefill: ``tokens`` = sum of lengths, ``tokens_sq`` = sum of squares.
    Decode: ``batch`` sequences holding ``context`` KV entries in all."""

    kind: str  # "prefill" | "decode"
    seconds: float
    tokens: int = 0
    tokens_sq: int = 0
    batch: int = 0
    context: int = 0

    @classmethod
    def prefill_batch(cls, lengths: Sequence[int], seconds: float) -> Timing:
        return cls("prefill", seconds, tokens=int(sum(lengths)), tokens_sq=int(sum(n * n for n in lengths)))

    @classmethod
    def decode_step(cls, batch: int, context: int, seconds: float) -> Timing:
        return cls("decode", seconds, batch=batch, context=context)


def read_timings(path: str | Path) -> list[Timing]:
    """Measured step times from a CSV: ``kind`` (prefill | decode), ``seconds``, and for prefill
    ``lengths`` (a JSON list) or ``tokens`` + ``tokens_sq``, for decode ``batch`` + ``context``."""
    import json

    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise DataError(f"timings file {p} not found", "check the path")
    try:
        df = pd.read_csv(p)
    except (ValueError, OSError) as e:
        raise DataError(f"cannot read {p} ({e})".splitlines()[0], "write a CSV with a header") from None
    if "kind" not in df or "seconds" not in df:
        raise DataError(f"{p} needs columns kind and seconds",
                        "plus lengths or tokens/tokens_sq (prefill), batch and context (decode)")
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        try:
            if rec["kind"] == "prefill" and isinstance(rec.get("lengths"), str):
                rows.append(Timing.prefill_batch(json.loads(rec["lengths"]), float(rec["seconds"])))
            else:
                rows.append(Timing(kind=str(rec["kind"]), seconds=float(rec["seconds"]),
                                   **{k: int(rec[k]) for k in ("tokens", "tokens_sq", "batch", "context")
                                      if k in rec and rec[k] == rec[k]}))
        except (ValueError, TypeError) as e:
            raise DataError(f"{p}: row {i + 1} (line {i + 2}) is not a timing ({e})".splitlines()[0],
                            "numbers for seconds/tokens/batch/context, a JSON list for lengths") from None
    return rows


def _lsq(design: np.ndarray, y: np.ndarray, nonneg: bool) -> np.ndarray:
    # Scale columns so that tiny per-token coefficients and large intercepts are fitted equally well.
    scale = np.maximum(np.abs(design).max(axis=0), 1e-30)
    x = design / scale
    if nonneg:
        from scipy.optimize import nnls

        coef, _ = nnls(x, y)
    else:
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return coef / scale


def fit_profile(
    timings: Iterable[Timing | Mapping[str, Any]],
    *,
    name: str = "fitted",
    base: LatencyProfile | str | None = None,
    nonneg: bool = True,
) -> LatencyProfile:
    """Least-squares fit of the prefill and decode coefficients to measured step times.

    ``timings``: :class:`Timing` objects or mappings with the same fields (e.g. rows of a CSV).
    Needs at least 3 prefill and 3 decode timings with varied shapes. Memory fields (KV bytes and
    capacity, batch limits) come from ``base`` (a profile or its name; default ``llama8b-h100``).
    ``nonneg`` keeps every coefficient >= 0 (physical: no step gets faster with more work).
    """
    rows = [t if isinstance(t, Timing) else Timing(**dict(t)) for t in timings]
    pre = [t for t in rows if t.kind == "prefill"]
    dec = [t for t in rows if t.kind == "decode"]
    bad = [t.kind for t in rows if t.kind not in ("prefill", "decode")]
    if bad:
        raise DataError(f"timing kinds must be 'prefill' or 'decode', got {sorted(set(bad))}",
                        "set each row's kind to prefill or decode")
    if len(pre) < 3 or len(dec) < 3:
        raise DataError(
            f"fit_profile needs >= 3 prefill and >= 3 decode timings, got {len(pre)} and {len(dec)}",
            "measure more batch shapes",
        )
    if any(not (t.seconds > 0) for t in rows):
        raise DataError("every timing needs seconds > 0", "drop or re-measure the rows with seconds <= 0")
    xp = np.array([[1.0, t.tokens, t.tokens_sq] for t in pre])
    yp = np.array([t.seconds for t in pre])
    xd = np.array([[1.0, t.context, t.batch] for t in dec])
    yd = np.array([t.seconds for t in dec])
    cp = _lsq(xp, yp, nonneg)
    cd = _lsq(xd, yd, nonneg)
    if isinstance(base, str) or base is None:
        base = get_profile(base or "llama8b-h100")
    return replace(
        base,
        name=name,
        prefill=(float(cp[0]), float(cp[1]), float(cp[2])),
        decode=(float(cd[0]), float(cd[1]), float(cd[2])),
        decode_large=None,
        large_batch_threshold=0,
        source=f"fitted by least squares to {len(pre)} prefill and {len(dec)} decode timings",
    )
