"""Collect configs (pydantic Config models), the flags derived from them, the engine option classes
and the card they make: the reference run's card must come out byte for byte the same."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

from lenpred.collect.base import ENGINES, EngineSetup, SamplingConfig
from lenpred.collect.hf import HFEngine, HFOptions
from lenpred.collect.llamacpp import LlamaCppOptions
from lenpred.collect.openai_engine import OpenAIEngine, OpenAIOptions
from lenpred.collect.runner import CollectConfig, run_card
from lenpred.commands import collect as collect_cmd
from lenpred.data.rundir import IDENTITY_KEYS, canonical_json, card_hash
from lenpred.data.sources import PromptConfig
from lenpred.errors import ConfigError

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "runs" / "smollm2-sharegpt" / "card.json"
# the card flags of data/runs/collect_reference.sh (and its first phase's targets / runtime options)
REFERENCE_ARGS = (
    "--model smollm2-135m --engine llamacpp --source sharegpt --max-prompt-tokens 512 --prompt-seed 0 "
    "--temperature 1.0 --top-p 1.0 --min-p 0.1 --frequency-penalty 0.3 --max-new-tokens 1024 --seed 0 "
    "--prompts 96 --samples 24 --n-parallel 64"
).split()


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    collect_cmd.add_arguments(p)
    return p.parse_args(argv)


def test_reference_card_is_unchanged(tmp_path):
    """The card built from the reference arguments has the reference run's identity, byte for byte.

    Reads data/runs/smollm2-sharegpt/card.json only; the run directory itself is not touched (the
    config points at a fresh path). The engine section holds llama-cpp-python's version, so it is
    compared only where that package is installed (at the version the run was made with)."""
    ref = json.loads(REFERENCE.read_text())
    cfg = collect_cmd.collect_config(_parse(["--run", str(tmp_path / "r"), *REFERENCE_ARGS]))
    assert cfg.options.runtime() == {"n_parallel": 64, "n_batch": 512, "n_threads": None}
    # the card's engine_runtime records the settings of the last (resumed) invocation: not identity
    assert set(ref["engine_runtime"]) == set(cfg.options.runtime())
    if importlib.util.find_spec("llama_cpp") is None:
        cfg = cfg.replace(engine="hf", engine_options=None)  # the other sections do not depend on the engine
    card, _, _, _ = run_card(cfg)
    for key in ("schema", "model", "prompts", "sampling"):
        assert canonical_json(card[key]) == canonical_json(ref[key]), key
    if cfg.engine == "llamacpp":
        import llama_cpp

        if llama_cpp.__version__ != ref["engine"]["version"]:
            pytest.skip(f"llama-cpp-python {llama_cpp.__version__} is not the reference's {ref['engine']['version']}")
        assert canonical_json({k: card[k] for k in IDENTITY_KEYS}) == canonical_json({k: ref[k] for k in IDENTITY_KEYS})
        assert card_hash(card) == ref["card_hash"] == "2a8f58b6441866e2"
    assert not (tmp_path / "r").exists()


def test_flags_keep_the_names_users_know_and_round_trip():
    a = _parse(["--run", "r", "--prompts-file", "p.jsonl", "--source", "jsonl", "--prompt-seed", "5", "--seed", "9",
                "--no-chat-template", "--no-dedup", "--system-prompt", "be brief", "--max-prompt-tokens", "64",
                "--top-k", "3", "--max-new-tokens", "32", "--engine", "hf", "--dtype", "bfloat16", "--batch-size", "3",
                "--no-progress"])
    cfg = collect_cmd.collect_config(a)
    assert cfg.prompts == PromptConfig(source="jsonl", path="p.jsonl", seed=5, max_prompt_tokens=64, chat_template=False,
                                       system_prompt="be brief", dedup=False)
    assert cfg.sampling == SamplingConfig(top_k=3, max_new_tokens=32, seed=9)  # --seed is the sampling seed
    assert cfg.engine_options == HFOptions(dtype="bfloat16", batch_size=3) and cfg.progress is False
    # no flags: the configs' own defaults, nothing copied by hand
    d = collect_cmd.collect_config(_parse(["--run", "r"]))
    assert d == CollectConfig(run_dir="r") and d.options == LlamaCppOptions()
    # every scalar field of every config has a flag
    p = argparse.ArgumentParser()
    collect_cmd.add_arguments(p)
    dests = {a.dest for a in p._actions}
    assert set(SamplingConfig.model_fields) <= dests
    assert {f"prompt_{f}" for f in PromptConfig.model_fields} <= dests
    for name in ENGINES.names():
        assert set(ENGINES.get(name).Options.model_fields) <= dests


def test_configs_are_frozen_and_refuse_unknown_keys():
    cfg = CollectConfig(run_dir="r")
    with pytest.raises(Exception, match="frozen"):
        cfg.samples = 3  # type: ignore[misc]
    with pytest.raises(ConfigError, match=r"sampling\.temp: unknown key -- fix: valid keys: temperature, top_p"):
        CollectConfig.from_dict({"run_dir": "r", "sampling": {"temp": 0.5}})
    with pytest.raises(ConfigError, match=r"engine_options\.n_parallel: unknown key .*batch_size"):
        CollectConfig.from_dict({"run_dir": "r", "engine": "hf", "engine_options": {"n_parallel": 4}})
    with pytest.raises(ConfigError, match=r"sampling\.temperature: must be > 0 for sampling, got 0.0 -- fix:"):
        CollectConfig.from_dict({"run_dir": "r", "sampling": {"temperature": 0}})
    with pytest.raises(ConfigError, match="HFOptions, but the llamacpp engine takes LlamaCppOptions"):
        CollectConfig(run_dir="r", engine="llamacpp", engine_options=HFOptions())
    assert CollectConfig.from_dict({"run_dir": "r", "engine": "openai", "engine_options": {"retries": 0}}).options == OpenAIOptions(retries=0)
    schema = CollectConfig.json_schema()
    assert "sampling" in schema["properties"] and "run_dir" in schema["required"]


def test_card_fields_decide_what_changes_the_card():
    """hf: the dtype is in the card, batch size and device are not; openai: the served model name is,
    the URL and the request settings are not. (One place: each options class's card_fields.)"""
    pytest.importorskip("torch")
    setup = EngineSetup("smollm2-135m", None, None, SamplingConfig(), 512)
    base = HFEngine.identity(HFOptions(), setup)
    assert HFEngine.identity(HFOptions(batch_size=3, device="cuda"), setup) == base
    assert HFEngine.identity(HFOptions(dtype="bfloat16"), setup) == {**base, "dtype": "bfloat16"}
    assert HFOptions(dtype="float16", batch_size=2).runtime() == {"batch_size": 2, "device": "cpu"}
    o = OpenAIOptions(base_url="http://a/v1", concurrency=2)
    assert OpenAIEngine.identity(o, setup) == {"name": "openai", "version": "v1-completions", "api_model": "smollm2-135m"}
    assert OpenAIEngine.identity(o.replace(base_url="http://b/v1", retries=9), setup) == OpenAIEngine.identity(o, setup)
    assert OpenAIEngine.identity(o.replace(api_model="other"), setup)["api_model"] == "other"
    assert "api_model" not in o.runtime() and o.runtime()["base_url"] == "http://a/v1"
    assert LlamaCppOptions().card() == {}


def test_every_engine_follows_the_protocol():
    """Each registered engine: its registry name, an EngineOptions class whose card_fields are real
    fields (checked when the options are built), and the protocol's methods."""
    from lenpred.collect.base import EngineOptions

    for name in ENGINES.names():
        cls = ENGINES.get(name)
        assert cls.name == name and issubclass(cls.Options, EngineOptions)
        opts = cls.Options()
        assert set(opts.card()) | set(opts.runtime()) == set(opts.to_dict()) and not set(opts.card()) & set(opts.runtime())
        for method in ("identity", "create", "generate", "close"):
            assert callable(getattr(cls, method)), (name, method)

    class Typo(EngineOptions):
        card_fields = ("dtpye",)
        dtype: str = "float32"

    with pytest.raises(TypeError, match=r"Typo.card_fields names unknown options \['dtpye'\]"):
        Typo()
