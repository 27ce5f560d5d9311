"""The Python API of collection, exactly as the README's "Python API" section shows it.

If one of these examples needs a change, change the README with it.
"""

from __future__ import annotations

import json

import pytest


def test_readme_engine_example_with_an_injected_transport():
    # --- README: an engine on its own, with a stand-in for vLLM (httpx.MockTransport) ---
    import httpx

    from lenpred.collect import Job, OpenAIEngine, OpenAIOptions, SamplingConfig
    from lenpred.models import load_tokenizer

    def server(request: httpx.Request) -> httpx.Response:  # answers like vLLM's /v1 API
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        n = json.loads(request.content)["n"]
        choices = [{"index": i, "text": "Blue.", "token_ids": [4, 5], "finish_reason": "stop"} for i in range(n)]
        return httpx.Response(200, json={"choices": choices})

    engine = OpenAIEngine(
        OpenAIOptions(base_url="http://vllm.test/v1", api_model="m"), SamplingConfig(max_new_tokens=64),
        load_tokenizer(), transport=httpx.MockTransport(server),
    )
    jobs = [Job("q0", k, (1, 2), "Name a color.", seed=k) for k in range(2)]
    results = list(engine.generate(iter(jobs)))
    # --- end of README example ---
    assert [(r.prompt_id, r.sample_idx, r.token_ids, r.stop_reason) for r in results] == [
        ("q0", 0, (4, 5), "eos"), ("q0", 1, (4, 5), "eos"),
    ]


@pytest.mark.slow
def test_readme_collect_example(tmp_path, monkeypatch):
    """Collect through the library with the transformers engine (runs wherever the embedded model does)."""
    monkeypatch.chdir(tmp_path)
    with open("prompts.jsonl", "w") as f:
        f.write('{"id": "q0", "prompt": "Name a color."}\n{"id": "q1", "prompt": "What is 2 + 5?"}\n')
    # --- README: collect a small run, then read it ---
    from lenpred.collect import CollectConfig, HFOptions, PromptConfig, SamplingConfig, collect
    from lenpred.data.rundir import RunDir

    cfg = CollectConfig(
        run_dir="runs/api-demo",
        engine="hf",
        prompts=PromptConfig(source="jsonl", path="prompts.jsonl"),
        sampling=SamplingConfig(temperature=1.0, top_p=1.0, min_p=0.1, max_new_tokens=16),
        n_prompts=2,
        samples=2,
        engine_options=HFOptions(batch_size=4),  # runtime only; HFOptions(dtype=...) would change the card
    )
    summary = collect(cfg)
    run = RunDir.open(summary.run_dir)
    lengths = run.samples(columns=["prompt_id", "sample_idx", "n_tokens", "stop_reason"])
    # --- end of README example ---
    assert summary.new_samples == 4 and summary.card_hash == run.card_hash
    assert sorted(zip(lengths.prompt_id, lengths.sample_idx, strict=True)) == [("q0", 0), ("q0", 1), ("q1", 0), ("q1", 1)]
    assert (lengths.n_tokens <= 16).all() and ((lengths.stop_reason == "length") == (lengths.n_tokens == 16)).all()
    assert run.card["engine"]["dtype"] == "float32" and run.card["engine_runtime"] == {"batch_size": 4, "device": "cpu"}
    again = collect(cfg)  # resumable: nothing left to do
    assert again.new_samples == 0 and again.total_samples == 4
