"""`lenpred draft inspect` and `lenpred draft convert` on a tiny head and a tiny target folder."""

from __future__ import annotations

import pytest
import torch
from draft_helpers import tiny_head, tiny_llama

from lenpred.cli import main
from lenpred.draft.io import load_draft, save_draft

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def head_and_target(tmp_path):
    model = tiny_llama(layers=8)
    model.save_pretrained(tmp_path / "target")
    head = tiny_head(model, n_draft=40)
    save_draft(head, tmp_path / "head")  # its layers: the default (2, L//2, L-3) of an 8-layer target
    return tmp_path / "head", tmp_path / "target"


def test_inspect_describes_the_head_and_checks_the_target(head_and_target, capsys):
    head, target = head_and_target
    assert main(["draft", "inspect", str(head), "--model", str(target)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"head        {head} (model.safetensors")
    assert out[2] == "vocabulary  40 draft ids of 96 target ids"
    assert out[3] == "layers      [2, 4, 5]"
    assert out[-1] == f"target ok   {target}: reads layers [2, 4, 5] of 8"


def test_convert_records_the_target_and_keeps_the_weights(head_and_target, tmp_path, capsys):
    head, target = head_and_target
    out = tmp_path / "converted"
    assert main(["draft", "convert", str(head), "--out", str(out), "--model", str(target), "--format", "bin",
                 "--dtype", "float32"]) == 0
    assert "wrote" in capsys.readouterr().err
    src, conv = load_draft(head), load_draft(out)
    assert conv.weights_file == "pytorch_model.bin" and conv.config.layers == (2, 4, 5)
    assert conv.meta["converted_from"] == str(head) and conv.meta["layers"] == [2, 4, 5]
    assert conv.meta["target"]["id"] == str(target)
    a, b = src.model.state_dict(), conv.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # fp16 -> fp32 is exact


def test_convert_refuses_its_own_source(head_and_target, capsys):
    head, _ = head_and_target
    assert main(["draft", "convert", str(head), "--out", str(head)]) == 1
    assert capsys.readouterr().err.count("\n") == 1
