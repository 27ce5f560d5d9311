"""Collection: sample K responses per prompt under one fixed card into a run directory.

Engines live in a registry (:data:`ENGINES`): ``hf`` (transformers), ``llamacpp``
(llama-cpp-python, optional extra) and ``openai`` (any OpenAI-compatible server); each has an
options class (:class:`HFOptions`, :class:`LlamaCppOptions`, :class:`OpenAIOptions`) whose
``card_fields`` say which options are part of the card. :func:`collect` drives one of them
resumably from a :class:`CollectConfig`.

Names are imported on first use (PEP 562), so ``lenpred.collect.base`` stays importable from the
data layer without pulling in the runner.
"""

from __future__ import annotations

from lenpred.lazy import lazy_exports

_WHERE = {
    "ENGINES": "lenpred.collect.engines",  # through engines: every engine is registered by then
    "Engine": "lenpred.collect.base",
    "EngineOptions": "lenpred.collect.base",
    "EngineSetup": "lenpred.collect.base",
    "Job": "lenpred.collect.base",
    "Result": "lenpred.collect.base",
    "SamplingConfig": "lenpred.collect.base",
    "sample_seed": "lenpred.collect.base",
    "HFEngine": "lenpred.collect.hf",
    "HFOptions": "lenpred.collect.hf",
    "LlamaCppEngine": "lenpred.collect.llamacpp",
    "LlamaCppOptions": "lenpred.collect.llamacpp",
    "OpenAIEngine": "lenpred.collect.openai_engine",
    "OpenAIOptions": "lenpred.collect.openai_engine",
    "CollectConfig": "lenpred.collect.runner",
    "CollectPlan": "lenpred.collect.runner",
    "CollectSummary": "lenpred.collect.runner",
    "collect": "lenpred.collect.runner",
    "prepare": "lenpred.collect.runner",
    "run_card": "lenpred.collect.runner",
    "PromptConfig": "lenpred.data.sources",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
