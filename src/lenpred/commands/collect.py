"""`lenpred collect`: sample K responses per prompt under one fixed card, resumably.

Every flag is derived from a config field (:class:`CollectConfig`, :class:`PromptConfig`,
:class:`SamplingConfig` and each engine's options class) by :func:`lenpred.config.add_arguments`;
:data:`FLAG_NAMES` keeps the few flag names users know that differ from ``--<field-name>``.
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic_core import PydanticUndefined

from lenpred.collect.base import ENGINES, EngineOptions, SamplingConfig
from lenpred.collect.runner import CollectConfig, collect
from lenpred.config import Config, from_arguments
from lenpred.config import add_arguments as derive_flags
from lenpred.data.sources import PromptConfig
from lenpred.errors import ConfigError

PROMPT_PREFIX = "prompt-"  # prompt fields get dest prompt_<field>, so `seed` cannot clash with the sampling seed
# flag as add_arguments names it -> the flag users know (everything else is --<field-name>)
FLAG_NAMES = {
    "--run-dir": "--run",
    "--n-prompts": "--prompts",
    "--prompt-source": "--source",
    "--prompt-path": "--prompts-file",
    "--prompt-max-prompt-tokens": "--max-prompt-tokens",
    "--prompt-chat-template": "--chat-template",
    "--prompt-system-prompt": "--system-prompt",
    "--prompt-dedup": "--dedup",
    "--n-threads": "--threads",
}


class _Flags:
    """Passes add_arguments' options to an argparse group under :data:`FLAG_NAMES`, marks fields
    without a default as required, and remembers dest -> flag (to name a flag in an error)."""

    def __init__(self, group: Any, flags: dict[str, str]) -> None:
        self.group, self.flags = group, flags

    def add_argument(self, flag: str, **kw: Any) -> Any:
        flag = FLAG_NAMES.get(flag, flag)
        if kw.get("default") is PydanticUndefined:
            kw.pop("default")
            kw["required"] = True
            kw["help"] = kw.get("help", "").split(" (default")[0]
        if kw.get("action") is not argparse.BooleanOptionalAction:
            kw["metavar"] = flag.lstrip("-").upper().replace("-", "_")
        self.flags[kw["dest"]] = flag
        return self.group.add_argument(flag, **kw)


def _engine_flags(p: argparse.ArgumentParser, flags: dict[str, dict[str, str]]) -> None:
    g = p.add_argument_group("engine options (runtime only, except those marked 'part of the card')")
    for name in ENGINES.names():
        flags[name] = {}
        derive_flags(_Flags(g, flags[name]), ENGINES.get(name).Options)  # type: ignore[arg-type]


def add_arguments(p: argparse.ArgumentParser) -> None:
    flags: dict[str, dict[str, str]] = {"": {}}
    derive_flags(_Flags(p, flags[""]), CollectConfig, exclude=("prompts", "sampling", "engine_options"))  # type: ignore[arg-type]
    derive_flags(_Flags(p.add_argument_group("prompts (part of the card)"), flags[""]), PromptConfig, prefix=PROMPT_PREFIX)  # type: ignore[arg-type]
    derive_flags(_Flags(p.add_argument_group("sampling card"), flags[""]), SamplingConfig)  # type: ignore[arg-type]
    _engine_flags(p, flags)
    p.set_defaults(_engine_flags=flags)


def prompt_config(a: argparse.Namespace) -> PromptConfig:
    return from_arguments(PromptConfig, a, prefix=PROMPT_PREFIX, where="prompts")  # type: ignore[no-any-return]


def sampling_config(a: argparse.Namespace) -> SamplingConfig:
    return from_arguments(SamplingConfig, a, where="sampling")  # type: ignore[no-any-return]


def engine_options(a: argparse.Namespace, engine: str) -> EngineOptions:
    """The chosen engine's options from its flags; a flag of another engine, set to something other
    than its default, is refused (it would be silently ignored)."""
    options_cls = ENGINES.get(engine).Options  # unknown engine: error listing the valid ones
    flags: dict[str, dict[str, str]] = getattr(a, "_engine_flags", {})
    own = set(options_cls.model_fields)
    for other, dests in flags.items():
        if other in ("", engine):
            continue
        other_cls = ENGINES.get(other).Options
        for dest, flag in dests.items():
            if dest not in own and getattr(a, dest, None) != other_cls.model_fields[dest].default:
                raise ConfigError(
                    f"{flag} is an option of the {other} engine, and this run uses --engine {engine}",
                    f"drop {flag}, or pass --engine {other}",
                )
    return from_arguments(options_cls, a, where="engine_options")  # type: ignore[no-any-return]


def collect_config(a: argparse.Namespace) -> CollectConfig:
    sub: dict[str, Config] = {"prompts": prompt_config(a), "sampling": sampling_config(a)}
    sub["engine_options"] = engine_options(a, a.engine)
    return from_arguments(CollectConfig, a, **sub)  # type: ignore[no-any-return]


def run(a: argparse.Namespace) -> int:
    from lenpred.data.rundir import check_run_target
    from lenpred.io.artifacts import check_out
    from lenpred.report.collect import summary_line

    cfg = collect_config(a)
    check_run_target(cfg.run_dir)  # a file, or somebody's non-empty directory
    check_out(cfg.run_dir, kind="run", flag="--run", inputs={"--prompts-file": cfg.prompts.path, "--model": cfg.model})
    print(summary_line(collect(cfg)))
    return 0
