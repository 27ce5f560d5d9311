"""`lenpred collect`: sample K responses per prompt under one fixed card, resumably."""

from __future__ import annotations

import argparse
import json

from lenpred.collect.base import SamplingConfig
from lenpred.collect.runner import CollectConfig, collect
from lenpred.data.sources import SOURCES, PromptConfig


def add_prompt_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("prompts")
    g.add_argument("--source", default="sharegpt", help=f"prompt source: {', '.join(SOURCES.names())} (default sharegpt)")
    g.add_argument("--prompts-file", default=None, help="a local prompt file for sharegpt-file / alpaca / jsonl")
    g.add_argument("--prompt-seed", type=int, default=0, help="seed of the prompt order (default 0)")
    g.add_argument("--max-prompt-tokens", type=int, default=512, help="skip longer prompts (default 512)")
    g.add_argument("--no-chat-template", action="store_true", help="feed the raw prompt, without the chat template")
    g.add_argument("--system-prompt", default=None, help="system prompt (default: the template's own)")
    g.add_argument("--no-dedup", action="store_true", help="keep duplicate prompts")


def add_sampling_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling card")
    d = SamplingConfig()
    g.add_argument("--temperature", type=float, default=d.temperature)
    g.add_argument("--top-p", type=float, default=d.top_p)
    g.add_argument("--top-k", type=int, default=d.top_k, help="0 = off")
    g.add_argument("--min-p", type=float, default=d.min_p, help="0 = off")
    g.add_argument("--repetition-penalty", type=float, default=d.repetition_penalty, help="1 = off (prompt + output)")
    g.add_argument("--frequency-penalty", type=float, default=d.frequency_penalty, help="0 = off (output only)")
    g.add_argument("--presence-penalty", type=float, default=d.presence_penalty, help="0 = off (output only)")
    g.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    g.add_argument("--seed", type=int, default=d.seed, help="sampling seed (per-sample seeds derive from it)")


def prompt_config(a: argparse.Namespace) -> PromptConfig:
    return PromptConfig(
        source=a.source,
        path=a.prompts_file,
        seed=a.prompt_seed,
        max_prompt_tokens=a.max_prompt_tokens,
        chat_template=not a.no_chat_template,
        system_prompt=a.system_prompt,
        dedup=not a.no_dedup,
    )


def sampling_config(a: argparse.Namespace) -> SamplingConfig:
    return SamplingConfig(
        temperature=a.temperature,
        top_p=a.top_p,
        top_k=a.top_k,
        min_p=a.min_p,
        repetition_penalty=a.repetition_penalty,
        frequency_penalty=a.frequency_penalty,
        presence_penalty=a.presence_penalty,
        max_new_tokens=a.max_new_tokens,
        seed=a.seed,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory (created, or resumed/extended if it exists)")
    p.add_argument("--model", default="smollm2-135m", help="smollm2-135m (embedded), a HF id, a local folder or .gguf")
    p.add_argument("--engine", default="llamacpp", help="hf | llamacpp | openai (default llamacpp)")
    p.add_argument("--prompts", type=int, default=16, help="the first N prompts of the run get samples")
    p.add_argument("--samples", type=int, default=4, help="samples per prompt (K)")
    add_prompt_arguments(p)
    add_sampling_arguments(p)
    g = p.add_argument_group("engine options (not part of the card)")
    g.add_argument("--n-parallel", type=int, default=16, help="llamacpp: sequences decoded together")
    g.add_argument("--batch-size", type=int, default=16, help="hf: rows decoded together")
    g.add_argument("--device", default="cpu", help="hf: torch device (cpu, cuda, cuda:1)")
    g.add_argument("--dtype", default="float32", help="hf: float32 | bfloat16 | float16 (part of the card)")
    g.add_argument("--threads", type=int, default=None, help="llamacpp: CPU threads (default: all cores)")
    g.add_argument("--base-url", default=None, help="openai: server URL, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--api-model", default=None, help="openai: model name the server expects (default --model)")
    g.add_argument("--concurrency", type=int, default=8, help="openai: requests in flight")
    g.add_argument("--n-per-request", type=int, default=0, help="openai: samples per request (n); 0 = all K at once")
    g.add_argument("--timeout", type=float, default=600.0, help="openai: seconds per request")
    g.add_argument("--retries", type=int, default=3, help="openai: retries per request")
    p.add_argument("--shard-size", type=int, default=64, help="samples per shard (default 64)")
    p.add_argument("--flush-seconds", type=float, default=120.0, help="write a shard at least this often")
    p.add_argument("--no-progress", action="store_true")


def engine_options(a: argparse.Namespace) -> dict[str, object]:
    return {
        "n_parallel": a.n_parallel,
        "batch_size": a.batch_size,
        "device": a.device,
        "dtype": a.dtype,
        "n_threads": a.threads,
        "base_url": a.base_url,
        "api_model": a.api_model,
        "concurrency": a.concurrency,
        "n_per_request": a.n_per_request,
        "timeout": a.timeout,
        "retries": a.retries,
    }


def run(a: argparse.Namespace) -> int:
    cfg = CollectConfig(
        run_dir=a.run,
        model=a.model,
        engine=a.engine,
        prompts=prompt_config(a),
        sampling=sampling_config(a),
        n_prompts=a.prompts,
        samples=a.samples,
        engine_options=engine_options(a),
        shard_size=a.shard_size,
        flush_seconds=a.flush_seconds,
        progress=not a.no_progress,
    )
    s = collect(cfg)
    print(
        json.dumps(
            {
                "run": s.run_dir,
                "card_hash": s.card_hash,
                "new_samples": s.new_samples,
                "new_tokens": s.new_tokens,
                "tokens_per_s": round(s.tokens_per_s, 1),
                "total_samples": s.total_samples,
                "shards_written": s.shards_written,
            }
        )
    )
    return 0
