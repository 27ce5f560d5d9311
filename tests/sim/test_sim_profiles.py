"""Latency profiles: the published DistServe numbers, the first-principles derivation, fitting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lenpred.errors import ConfigError, DataError
from lenpred.sim.profiles import (
    H100_SXM_BF16,
    LLAMA31_8B_BF16,
    PROFILES,
    LatencyProfile,
    Timing,
    derive_profile,
    fit_profile,
    get_profile,
)

# DistServe's simulator (LLMServe/DistServe @82831f1, simdistserve/), written out as their code
# computes it, in milliseconds, for PP = 1: the fit after "Realign the curve" (4c68ed9) plus
# Worker.add_ray_overhead (2 + 1e-4 * sum of context lengths, every step) and pp_const (1 per prefill).
DS_PREFILL = (18.10254647486372, 0.1019122572698738, 7.122264314252114e-06)
DS_SMALL = (19.934702624895458, 0.0006269356524350583, 0.03850697740828398)
DS_LARGE = (7.1661889468253595, 0.0005798000403396046, 0.15831096191764046)


def distserve_prefill_ms(lens: list[int]) -> float:
    a, b, c = DS_PREFILL
    return a + b * sum(lens) + c * sum(n * n for n in lens) + 1 + (2 + 1e-4 * sum(lens))


def distserve_decode_ms(context_lens: list[int]) -> float:
    """``context_lens``: prompt + tokens decoded so far (DistServe's current_context_len)."""
    a, b, c = DS_SMALL if len(context_lens) < 95 else DS_LARGE
    return a + b * sum(x + 1 for x in context_lens) + c * len(context_lens) + (2 + 1e-4 * sum(context_lens))


def test_distserve_opt13b_step_times_are_distserves() -> None:
    p = get_profile("distserve-opt13b")
    assert p.prefill_time([512]) == pytest.approx(distserve_prefill_ms([512]) * 1e-3, rel=1e-12)
    assert p.prefill_time([100, 900, 7]) == pytest.approx(distserve_prefill_ms([100, 900, 7]) * 1e-3, rel=1e-12)
    # our context counts the prefill's token too: DistServe's context + 1 per request
    for ctx_ds in ([300] * 10, list(range(200, 300))):  # batch 10 (small fit), batch 100 (large fit)
        ours = p.decode_time(len(ctx_ds), sum(x + 1 for x in ctx_ds))
        assert ours == pytest.approx(distserve_decode_ms(ctx_ds) * 1e-3, rel=1e-12)
    assert p.kv_capacity_tokens == 66144
    assert p.kv_bytes_per_token == 819_200
    assert "4c68ed9" in p.source and "82831f1" in p.source


def test_one_isolated_request_has_distserves_closed_form_ttft_and_decode_time() -> None:
    from lenpred.sim.arm import ArmPolicy
    from lenpred.sim.config import ClusterConfig
    from lenpred.sim.engine import simulate
    from lenpred.sim.request import Request

    prompt, output = 512, 100  # 1 token from prefill, 99 decode steps
    link = 25e9  # bytes/s: the transfer of 512 tokens x 819,200 B takes 16.78 ms
    res = simulate([Request(0, 1.0, prompt, output, output)], ClusterConfig(profile="distserve-opt13b"),
                   ArmPolicy())
    ttft = distserve_prefill_ms([prompt]) * 1e-3
    assert res.t_first[0] - 1.0 == pytest.approx(ttft, rel=1e-12)
    assert ttft == pytest.approx(0.07520, abs=1e-5)  # 18.10 + 52.18 + 1.87 + 1 + 2 + 0.05 ms
    transfer = prompt * 819_200 / link
    decode = sum(distserve_decode_ms([prompt + k]) for k in range(output - 1)) * 1e-3
    assert res.t_finish[0] - res.t_first[0] == pytest.approx(transfer + decode, rel=1e-12)
    assert decode / (output - 1) == pytest.approx(0.02238, abs=1e-5)  # 19.93 + 2 + 0.04 + 0.41 ms per step


def test_llama8b_first_principles_numbers() -> None:
    p = get_profile("llama8b-h100")
    # weights 8.03e9 * 2 B over 0.8 * 3.35 TB/s
    assert p.decode[0] == pytest.approx(8.03e9 * 2 / (0.8 * 3.35e12))
    assert p.decode[0] == pytest.approx(5.99e-3, rel=1e-3)
    assert p.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    assert p.decode[1] == pytest.approx(131_072 / 2.68e12)
    assert p.decode[2] == pytest.approx(2 * 8.03e9 / (0.7 * 989.4e12))
    assert 440_000 < p.kv_capacity_tokens < 460_000
    # a single stream decodes at ~160 tokens/s, a 1k-token prompt prefills in a few tens of ms
    assert 1 / p.decode_time(1, 1000) == pytest.approx(163, rel=0.05)
    assert 0.02 < p.prefill_time([1000]) < 0.05
    fp8 = get_profile("llama8b-h100-fp8")
    assert fp8.kv_bytes_per_token == 65_536 and fp8.decode[0] == pytest.approx(p.decode[0] / 2)


def test_derive_rejects_a_model_that_does_not_fit() -> None:
    from dataclasses import replace

    huge = replace(LLAMA31_8B_BF16, name="huge", n_params=70e9)
    with pytest.raises(ConfigError, match="does not fit"):
        derive_profile(huge, H100_SXM_BF16, name="x")


def test_fit_profile_recovers_coefficients() -> None:
    true = LatencyProfile("t", prefill=(0.02, 3e-5, 4e-10), decode=(0.006, 5e-8, 3e-5),
                          kv_bytes_per_token=1, kv_capacity_tokens=10)
    rng = np.random.default_rng(0)
    timings = []
    for _ in range(40):
        lens = rng.integers(16, 2048, rng.integers(1, 8)).tolist()
        timings.append(Timing.prefill_batch(lens, true.prefill_time(lens)))
        b = int(rng.integers(1, 256))
        ctx = int(b * rng.integers(100, 2000))
        timings.append(Timing.decode_step(b, ctx, true.decode_time(b, ctx)))
    fit = fit_profile(timings, name="fit", base="llama8b-h100")
    np.testing.assert_allclose(fit.prefill, true.prefill, rtol=1e-6)
    np.testing.assert_allclose(fit.decode, true.decode, rtol=1e-6)
    assert fit.kv_capacity_tokens == get_profile("llama8b-h100").kv_capacity_tokens
    # mappings (e.g. CSV rows) work too, and noise is tolerated
    rows = [dict(kind=t.kind, seconds=t.seconds * (1 + 0.01 * rng.standard_normal()), tokens=t.tokens,
                 tokens_sq=t.tokens_sq, batch=t.batch, context=t.context) for t in timings]
    noisy = fit_profile(rows)
    assert noisy.decode[0] == pytest.approx(0.006, rel=0.1)
    assert min(noisy.prefill + noisy.decode) >= 0


def test_fit_profile_bad_input() -> None:
    with pytest.raises(DataError, match=">= 3 prefill"):
        fit_profile([Timing.decode_step(1, 10, 0.01)] * 5)
    with pytest.raises(DataError, match="kinds"):
        fit_profile([Timing("train", 1.0)])
    bad = [Timing.prefill_batch([10], 0.0)] * 3 + [Timing.decode_step(1, 10, 0.01)] * 3
    with pytest.raises(DataError, match="seconds > 0"):
        fit_profile(bad)


def test_profile_validation_and_registry() -> None:
    with pytest.raises(ConfigError):
        LatencyProfile("x", prefill=(1.0, 2.0), decode=(1.0, 1.0, 1.0), kv_bytes_per_token=1,  # type: ignore[arg-type]
                       kv_capacity_tokens=1)
    with pytest.raises(ConfigError):
        LatencyProfile("x", prefill=(1.0, 1.0, 1.0), decode=(1.0, 1.0, 1.0), kv_bytes_per_token=0,
                       kv_capacity_tokens=1)
    assert {"distserve-opt13b", "llama8b-h100", "llama8b-h100-fp8"} <= set(PROFILES.names())
    p = get_profile("llama8b-h100").with_overrides(kv_capacity_tokens=123, max_batch=None)
    assert p.kv_capacity_tokens == 123 and p.max_batch == 256


def test_profile_json_roundtrip_and_cli_fit(tmp_path: Path) -> None:
    import json

    from lenpred.cli import main
    from lenpred.sim.profiles import profile_from_dict

    p = get_profile("distserve-opt13b")
    assert profile_from_dict(json.loads(json.dumps(p.describe()))) == p
    true = LatencyProfile("t", prefill=(0.02, 3e-5, 4e-10), decode=(0.006, 5e-8, 3e-5),
                          kv_bytes_per_token=1, kv_capacity_tokens=10)
    lines = ["kind,seconds,lengths,batch,context"]
    for lens in ([100], [500, 20], [1000, 1000, 7], [64] * 8, [3000]):
        lines.append(f'prefill,{true.prefill_time(lens)},"{json.dumps(lens)}",,')
    for b, ctx in ((1, 500), (16, 9000), (64, 40000), (200, 150000), (8, 100)):
        lines.append(f"decode,{true.decode_time(b, ctx)},,{b},{ctx}")
    csv = tmp_path / "timings.csv"
    csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "fitted.json"
    assert main(["simulate", "--fit-profile", str(csv), "--out", str(out)]) == 0
    fitted = get_profile(str(out))
    np.testing.assert_allclose(fitted.decode, true.decode, rtol=1e-5)
    np.testing.assert_allclose(fitted.prefill, true.prefill, rtol=1e-5)
    # a fitted profile file plugs into a cluster config
    from lenpred.sim.arm import ArmPolicy
    from lenpred.sim.config import ClusterConfig
    from lenpred.sim.engine import simulate
    from lenpred.sim.request import Request

    res = simulate([Request(0, 0.0, 10, 5, 5)], ClusterConfig(profile=str(out)), ArmPolicy())
    # alone: prefill of 10 tokens, the KV transfer (llama8b-h100's 131,072 B/token at 25 GB/s), then 4
    # decode steps at batch 1 with 11..14 context tokens, all at the fitted (= true) coefficients
    transfer = 10 * 131_072 / 25e9
    decode = sum(true.decode_time(1, 10 + k) for k in range(1, 5))
    assert res.t_first[0] == pytest.approx(true.prefill_time([10]), rel=1e-5)
    assert res.t_finish[0] == pytest.approx(true.prefill_time([10]) + transfer + decode, rel=1e-5)
    with pytest.raises(ConfigError, match="not found"):
        get_profile(str(tmp_path / "nope.json"))
