"""Bad inputs of `lenpred serve` (rows for tests/test_bad_input.py): everything that must fail at start
with one line and exit code 1 -- before anything listens."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from bad_input_harness import BadInput

_HELD: list[socket.socket] = []  # sockets kept open while the harness runs the command


def _ridge_head(tmp: Path) -> Path:
    """A ridge head on synthetic features (no target model recorded: fast, and a bad input of its own)."""
    from lenpred.predictors.registry import make_predictor
    from lenpred.predictors.synthetic import planted

    d = planted(40, 2, seed=0)
    make_predictor("ridge").fit(d["X"], d["y"]).save(tmp / "head", card={"sampling": {"max_new_tokens": 1024}})
    return tmp / "head"


def _head(tmp: Path) -> dict[str, Any]:
    return {"head": _ridge_head(tmp)}


def _edited_head(**changes: Any):
    def setup(tmp: Path) -> dict[str, Any]:
        head = _ridge_head(tmp)
        meta = json.loads((head / "meta.json").read_text())
        meta.update(changes)
        (head / "meta.json").write_text(json.dumps(meta))
        return {"head": head}

    return setup


def _head_of_a_gone_model(tmp: Path) -> dict[str, Any]:
    """A head whose features came from a model folder that is no longer there."""
    head = _ridge_head(tmp)
    meta = json.loads((head / "meta.json").read_text())
    meta["feature_spec"]["model"] = {"id": str(tmp / "gone-model"), "fingerprint": "sha256:0"}
    (head / "meta.json").write_text(json.dumps(meta))
    return {"head": head}


def _file(tmp: Path) -> dict[str, Any]:
    (tmp / "head.json").write_text("{}")
    return {"head": tmp / "head.json"}


def _plain_dir(tmp: Path) -> dict[str, Any]:
    (tmp / "heads").mkdir()
    (tmp / "heads" / "notes.txt").write_text("not a head\n")
    return {"head": tmp / "heads"}


def _features(tmp: Path) -> dict[str, Any]:
    from lenpred.features.store import save_features
    from lenpred.predictors.synthetic import CARD, planted

    save_features(tmp / "feats", planted(10, 2, seed=0)["X"], CARD)
    return {"head": tmp / "feats"}


def _outlets_head(tmp: Path) -> dict[str, Any]:
    """The committed OUTLETS head (a head artifact of input kind 'trajectory'), copied."""
    import shutil

    src = Path(__file__).resolve().parents[2] / "data" / "outlets" / "smollm2-sharegpt" / "outlets"
    return {"head": shutil.copytree(src, tmp / "outlets")}


def _busy_port(tmp: Path) -> dict[str, Any]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    _HELD.append(s)
    return {"port": s.getsockname()[1]}


CASES: list[BadInput] = [
    BadInput("serve-head-missing", ["serve", "--head", "{tmp}/no-such-head", "--port", "0"], None,
             expect="does not exist"),
    BadInput("serve-head-is-a-file", ["serve", "--head", "{head}", "--port", "0"], _file, expect="is not a directory"),
    BadInput("serve-head-not-an-artifact", ["serve", "--head", "{head}", "--port", "0"], _plain_dir,
             expect="is not a lenpred head"),
    BadInput("serve-head-is-features", ["serve", "--head", "{head}", "--port", "0"], _features,
             expect="is a features artifact, expected head"),
    BadInput("serve-head-other-version", ["serve", "--head", "{head}", "--port", "0"], _edited_head(schema_version=99),
             expect="schema version 99"),
    BadInput("serve-head-unknown-predictor", ["serve", "--head", "{head}", "--port", "0"],
             _edited_head(predictor="nonesuch"), expect="this lenpred does not know"),
    BadInput("serve-head-is-outlets", ["serve", "--head", "{head}", "--port", "0"], _outlets_head,
             expect="is an OUTLETS head (input kind 'trajectory')"),
    BadInput("serve-head-without-target-model", ["serve", "--head", "{head}", "--port", "0"], _head,
             expect="records no target model"),
    BadInput("serve-head-model-gone", ["serve", "--head", "{head}", "--port", "0"], _head_of_a_gone_model,
             expect="gone-model', which cannot be loaded here"),
    BadInput("serve-model-unknown", ["serve", "--head", "{head}", "--port", "0", "--model", "./no-such-model"],
             _head_of_a_gone_model, expect="unknown model './no-such-model'"),
    BadInput("serve-port-busy", ["serve", "--head", "{tmp}/whatever", "--port", "{port}"], _busy_port,
             expect="cannot listen on 127.0.0.1"),
    BadInput("serve-port-out-of-range", ["serve", "--head", "{tmp}/h", "--port", "70000"], None,
             expect="port: Input should be less than or equal to 65535"),
    BadInput("serve-max-batch-zero", ["serve", "--head", "{tmp}/h", "--max-batch", "0"], None,
             expect="max_batch: Input should be greater than or equal to 1"),
    BadInput("serve-body-limit-tiny", ["serve", "--head", "{tmp}/h", "--max-body-bytes", "10"], None,
             expect="max_body_bytes"),
]

CASES += [  # issue 29 part 11: the last bad-input tail (the device was checked after the model loaded)
    BadInput("serve-unknown-device", ["serve", "--head", "{head}", "--port", "0", "--device", "gpu9"], _head,
             expect="--device 'gpu9' is not a torch device"),
]

_HEADS = Path(__file__).resolve().parents[2] / "data" / "heads"
CASES += [  # issue 31: a proxy encoder runtime on another head; --inline on a head that runs the target's prefill
    BadInput("serve-runtime-not-proxy", ["serve", "--head", str(_HEADS / "ngram-smollm2-sharegpt"), "--port", "0",
                                         "--runtime", "onnx"], None,
             expect="runtime 'onnx' applies to the proxy head's encoder; head"),
]
