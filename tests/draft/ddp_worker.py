"""Run by tests/draft/test_train.py under torchrun: data-parallel training of a tiny head.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/draft/ddp_worker.py TMP TAG
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).parent))
from draft_helpers import tiny_llama, tiny_split

from lenpred.data.rundir import RunDir
from lenpred.draft.target import Target
from lenpred.draft.train import TrainJob, train_draft
from lenpred.draft.train_config import DraftTrainConfig
from lenpred.draft.train_data import DraftSource


def main() -> None:
    tmp, tag = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    run = RunDir.open(tmp / "run")
    cfg = DraftTrainConfig(draft_vocab_size=48, ttt_steps=2, max_steps=8, warmup_steps=2, lr=1e-3,
                           tokens_per_batch=240, checkpoint_every=4, eval_every=0, dtype="float32")
    src = DraftSource(run, tiny_split(run, n_val=2), Target(tiny_llama(init=0.1)),
                      SimpleNamespace(id="tiny", fingerprint="sha256:" + "ab" * 32))
    res = train_draft(TrainJob(src, cfg, tmp / f"head-{tag}", 95, cache_dir=tmp / f"cache-{tag}",
                               ckpt_dir=tmp / f"ck-{tag}", progress=False))
    rank = os.environ.get("RANK", "0")
    (tmp / f"{tag}-rank{rank}.json").write_text(json.dumps({"digest": res.digest, "steps": res.steps}))


if __name__ == "__main__":
    main()
