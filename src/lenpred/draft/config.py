"""The draft head's ``config.json``: the released EAGLE-3 layout, read strictly, written faithfully.

Released heads (SafeAILab/EAGLE ``traineagle3``, SpecForge exports, the heads vLLM and SGLang load)
ship a LlamaForCausalLM-style ``config.json`` with one decoder layer and ``draft_vocab_size``;
``vocab_size`` is the *target's* vocabulary. Optional fields some exporters add:

* ``target_hidden_size`` -- width of the target's hidden states when it differs from the draft's
  (``fc`` then maps ``3 * target_hidden_size -> hidden_size``);
* ``eagle_config.eagle_aux_hidden_state_layer_ids`` -- which target layers feed ``fc``. SGLang and
  SpecForge name layer *outputs* there (id ``j`` = output of decoder layer ``j``), while the capture
  itself, in every implementation, takes the residual stream *entering* a layer.

**Layer convention used in lenpred** (``DraftConfig.layers``): indices into transformers'
``output_hidden_states`` tuple, i.e. the input of decoder layer ``j`` (0 = embeddings). The default,
when a config names none, is the one every released implementation hard-codes: ``(2, L // 2, L - 3)``
for a target with ``L`` decoder layers (EAGLE's ``modeling_llama_kv.py`` captures the hidden state
entering layers 2, L//2 and L-3; SGLang's default ``layers_to_capture`` is the same list). When lenpred
writes a config it stores the layers as SGLang/SpecForge ids (``layers - 1``), so those loaders read
the same layers back.

Fields that would change the computation in ways this implementation does not reproduce
(rope scaling, attention/MLP biases, ``norm_before_residual``, ``fc_norm``, more than one layer)
are refused with an error rather than silently ignored; other unknown fields are bookkeeping that
exporters add, listed by ``lenpred draft inspect``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lenpred.errors import ModelError

ARCHITECTURE = "LlamaForCausalLMEagle3"  # what SpecForge / SGLang write; EAGLE's release writes LlamaForCausalLM
DEFAULT_ROPE_THETA = 10000.0  # LlamaConfig's default; the EAGLE-3 release config names none
# keys of config.json we read; anything else (transformers_version, use_cache, ...) is bookkeeping
_IGNORED = {
    "architectures", "model_type", "transformers_version", "use_cache", "initializer_range", "torch_dtype",
    "dtype", "pretraining_tp", "attention_dropout", "tie_word_embeddings", "bos_token_id", "eos_token_id",
    "pad_token_id", "unk_token_id", "_name_or_path", "_model_name_or_path", "num_hidden_layers",
    "rope_scaling", "rope_parameters", "attention_bias", "mlp_bias", "norm_before_residual", "fc_norm",
    "eagle_config", "lenpred", "norm_output",
}


def default_layers(n_layers: int) -> tuple[int, int, int]:
    """The released choice: hidden states entering decoder layers 2, L // 2 and L - 3."""
    layers = (2, n_layers // 2, n_layers - 3)
    if not (0 < layers[0] < layers[1] < layers[2] < n_layers):
        raise ModelError(
            f"a target with {n_layers} decoder layers has no three distinct EAGLE-3 layers (2, L//2, L-3 = {layers})",
            "use a target with at least 8 layers, or pass the layers explicitly",
        )
    return layers


@dataclass(frozen=True)
class DraftConfig:
    """Shape and numerics of one EAGLE-3 draft head (one Llama decoder layer over [emb ; fused])."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # the target's vocabulary (t2d has this length)
    draft_vocab_size: int
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    target_hidden_size: int = 0  # 0: same as hidden_size
    rms_norm_eps: float = 1e-5
    rope_theta: float = DEFAULT_ROPE_THETA
    max_position_embeddings: int = 2048
    hidden_act: str = "silu"
    layers: tuple[int, ...] | None = None  # lenpred convention (see module doc); None = the default for the target
    torch_dtype: str = "float16"
    token_ids: dict[str, Any] = field(default_factory=dict)  # bos/eos/pad ids copied from the target (bookkeeping)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.target_hidden_size == 0:
            object.__setattr__(self, "target_hidden_size", self.hidden_size)
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(int(x) for x in self.layers))
        for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                     "vocab_size", "draft_vocab_size", "head_dim"):
            if int(getattr(self, name)) <= 0:
                raise ModelError(f"draft config: {name} must be positive, got {getattr(self, name)}",
                                 f"set {name} in the head's config.json to a positive integer")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelError(
                f"draft config: num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}",
                "set num_attention_heads to a multiple of num_key_value_heads in the head's config.json",
            )
        if self.draft_vocab_size > self.vocab_size:
            raise ModelError(
                f"draft config: draft_vocab_size {self.draft_vocab_size} exceeds vocab_size {self.vocab_size}",
                "the draft vocabulary is a subset of the target's",
            )
        if self.hidden_act != "silu":
            raise ModelError(f"draft config: hidden_act {self.hidden_act!r} is not supported (only silu)",
                             "use an EAGLE-3 head with hidden_act silu")
        if self.layers is not None and len(self.layers) != 3:
            raise ModelError(f"draft config: EAGLE-3 fuses 3 target layers, the config names {len(self.layers)}",
                             "name three target layers (eagle_config.eagle_aux_hidden_state_layer_ids)")

    # ------------------------------------------------------------------ construction
    @classmethod
    def for_target(cls, target_config: Any, draft_vocab_size: int, layers: tuple[int, ...] | None = None,
                   torch_dtype: str = "float16") -> DraftConfig:
        """A head shaped like one decoder layer of the target (the release does the same)."""
        c = target_config
        n_layers = int(c.num_hidden_layers)
        layers = tuple(layers) if layers is not None else default_layers(n_layers)
        head_dim = int(getattr(c, "head_dim", 0) or c.hidden_size // c.num_attention_heads)
        return cls(
            hidden_size=int(c.hidden_size),
            intermediate_size=int(c.intermediate_size),
            num_attention_heads=int(c.num_attention_heads),
            num_key_value_heads=int(getattr(c, "num_key_value_heads", None) or c.num_attention_heads),
            vocab_size=int(c.vocab_size),
            draft_vocab_size=int(draft_vocab_size),
            head_dim=head_dim,
            rms_norm_eps=float(getattr(c, "rms_norm_eps", 1e-5)),
            max_position_embeddings=int(getattr(c, "max_position_embeddings", 2048)),
            layers=layers,
            torch_dtype=torch_dtype,
            token_ids={k: getattr(c, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
        )

    @classmethod
    def from_json(cls, data: Any, where: str = "config.json") -> DraftConfig:
        """Read a released head's config.json (strict about what changes the computation)."""
        if not isinstance(data, dict):
            raise ModelError(f"{where} is not a JSON object", "pass the head's own config.json (a JSON object)")
        unsupported = [
            ("num_hidden_layers", data.get("num_hidden_layers", 1) != 1, "EAGLE-3 heads have one decoder layer"),
            ("rope_scaling", bool(data.get("rope_scaling")), "rope scaling is not implemented for draft heads"),
            ("attention_bias", bool(data.get("attention_bias")), "attention biases are not implemented"),
            ("mlp_bias", bool(data.get("mlp_bias")), "MLP biases are not implemented"),
            ("norm_before_residual", bool(data.get("norm_before_residual")), "only the released residual order is implemented"),
            ("fc_norm", bool(data.get("fc_norm")), "per-layer norms before fc are not implemented"),
            ("tie_word_embeddings", bool(data.get("tie_word_embeddings")), "draft heads have their own lm_head"),
        ]
        for key, bad, why in unsupported:
            if bad:
                raise ModelError(f"{where}: {key}={data.get(key)!r} is not supported ({why})",
                                 "use a head in the released EAGLE-3 layout")
        rope = data.get("rope_parameters") or {}
        if rope and rope.get("rope_type", "default") != "default":
            raise ModelError(f"{where}: rope_parameters.rope_type={rope.get('rope_type')!r} is not supported",
                             "use a head with default rotary embeddings")
        required = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
        missing = [k for k in required if k not in data]
        if missing:
            raise ModelError(f"{where} lacks {', '.join(missing)}", "pass the config.json of an EAGLE-3 head")
        layers = None
        ec = data.get("eagle_config") or {}
        if not isinstance(ec, dict):
            raise ModelError(f"{where}: eagle_config is not an object",
                             "make eagle_config an object, or drop it to use lenpred's default layers")
        if ec.get("use_aux_hidden_state") is False:
            raise ModelError(f"{where}: eagle_config.use_aux_hidden_state=false is an EAGLE-1/2 head, not EAGLE-3",
                             "pass an EAGLE-3 head (one trained on three target layers)")
        if ec.get("eagle_aux_hidden_state_layer_ids") is not None:
            layers = tuple(int(x) + 1 for x in ec["eagle_aux_hidden_state_layer_ids"])  # outputs -> inputs
        try:
            return cls(
                hidden_size=int(data["hidden_size"]),
                intermediate_size=int(data["intermediate_size"]),
                num_attention_heads=int(data["num_attention_heads"]),
                num_key_value_heads=int(data.get("num_key_value_heads") or data["num_attention_heads"]),
                vocab_size=int(data["vocab_size"]),
                draft_vocab_size=int(data.get("draft_vocab_size") or data["vocab_size"]),
                head_dim=int(data.get("head_dim") or 0),
                target_hidden_size=int(data.get("target_hidden_size") or 0),
                rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
                rope_theta=float(data.get("rope_theta") or rope.get("rope_theta") or DEFAULT_ROPE_THETA),
                max_position_embeddings=int(data.get("max_position_embeddings", 2048)),
                hidden_act=str(data.get("hidden_act", "silu")),
                layers=layers,
                torch_dtype=str(data.get("torch_dtype") or data.get("dtype") or "float16"),
                token_ids={k: data.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
            )
        except (TypeError, ValueError) as e:
            raise ModelError(f"{where}: a field has the wrong type ({e})",
                             "correct that field of the head's config.json") from None

    @classmethod
    def load(cls, path: Path) -> DraftConfig:
        p = Path(path)
        if not p.is_file():
            raise ModelError(f"{p.parent} has no config.json", "pass an EAGLE-3 head directory (config.json + weights)")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ModelError(f"{p} is not valid JSON ({e})", "restore the head's config.json (UTF-8 JSON)") from None
        return cls.from_json(data, where=str(p))

    @staticmethod
    def unknown_fields(data: dict[str, Any]) -> list[str]:
        """Fields of a config.json this reader does not use (exporters add their own bookkeeping;
        ``lenpred draft inspect`` lists them so a person can judge)."""
        known = set(DraftConfig.__dataclass_fields__) | _IGNORED
        return sorted(set(data) - known)

    def to_json(self) -> dict[str, Any]:
        """config.json as released heads have it (plus the layer ids in the SGLang/SpecForge field)."""
        out: dict[str, Any] = {
            "architectures": [ARCHITECTURE],
            "model_type": "llama",
            "hidden_act": self.hidden_act,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "num_hidden_layers": 1,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "tie_word_embeddings": False,
            "torch_dtype": self.torch_dtype,
            "use_cache": True,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
        }
        if self.target_hidden_size != self.hidden_size:
            out["target_hidden_size"] = self.target_hidden_size
        if self.layers is not None:
            out["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [x - 1 for x in self.layers],
                                   "use_aux_hidden_state": True}
        out.update({k: v for k, v in self.token_ids.items() if v is not None})
        return out

    def resolved_layers(self, n_target_layers: int) -> tuple[int, int, int]:
        if self.layers is None:
            return default_layers(n_target_layers)
        a, b, c = self.layers
        return (a, b, c)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
