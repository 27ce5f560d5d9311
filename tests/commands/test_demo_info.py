"""The README's main job (`lenpred demo`) and the small verbs, on the real embedded model."""

from __future__ import annotations

import json

from lenpred.cli import main
from model_testing import needs_llama


@needs_llama
def test_demo_runs_live_and_summarises_reference(tmp_path, capsys):
    run = tmp_path / "demo"
    assert main(["demo", "--prompts", "2", "--samples", "2", "--max-new-tokens", "16", "--run", str(run),
                 "--live-max-new-tokens", "24"]) == 0
    out = capsys.readouterr().out
    # the live OUTLETS part: the committed draft and length heads, a re-prediction line, the true length
    assert "OUTLETS: the remaining length" in out and "tokens | remaining ~" in out and "true length" in out
    assert "not committed yet" not in out
    assert "per-prompt decode lengths" in out and "the committed reference run" in out
    assert "prefill bound on the reference run" in out and "oracle MAE" in out
    # the fast heads trained on the committed features, benched against the bound
    assert "bench on the test split" in out and "oracle bound" in out
    for head in ("constant", "prompt-length", "ridge", "prompt-median (oracle)"):
        assert f"│ {head}" in out, head
    # the live run is a real run directory under the reference card (capped shorter)
    card = json.loads((run / "card.json").read_text())
    assert card["sampling"]["max_new_tokens"] == 16 and card["model"]["id"] == "smollm2-135m"
    assert main(["info", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["samples"] == 4 and info["prompts"] == 2 and info["samples_per_prompt"] == {"2": 2}


def test_model_verb_prints_fingerprint(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # CI has no hub: an unknown id must fail fast, not time out
    assert main(["model", "smollm2-135m"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fingerprint"].startswith("sha256:") and d["upstream"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert main(["model", "not/a-real-model-xyz"]) == 1
