"""Collection: sample K responses per prompt under one fixed card into a run directory.

Engines live in a registry (:data:`lenpred.collect.base.ENGINES`): ``hf`` (transformers),
``llamacpp`` (llama-cpp-python, optional extra) and ``openai`` (any OpenAI-compatible server).
:func:`lenpred.collect.runner.collect` drives one of them resumably.
"""
