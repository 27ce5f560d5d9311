"""EAGLE-3 draft heads for a target model: the released layout, training, speculative decoding.

* :mod:`lenpred.draft.config` -- the head's ``config.json`` (released fields; layer convention);
* :mod:`lenpred.draft.model` -- the head as a torch module with the released state-dict names;
* :mod:`lenpred.draft.io` -- strict load / save (``model.safetensors`` or ``pytorch_model.bin``,
  plus lenpred's ``meta.json``), and the check of a head against a target;
* :mod:`lenpred.draft.vocab` -- the reduced draft vocabulary (``d2t`` / ``t2d``);
* :mod:`lenpred.draft.target` -- the target model with its low / mid / high states captured;
* :mod:`lenpred.draft.speculative` -- chain speculative decoding (greedy and exact sampling), which
  exposes the draft hidden states at every cycle; :mod:`lenpred.draft.tree` -- dynamic draft trees
  (greedy); :mod:`lenpred.draft.sampling` -- the card's sampling distribution;
* :mod:`lenpred.draft.states` -- the teacher-forced target states, cached in shards;
* :mod:`lenpred.draft.train` -- training-time-test training of a head on a run's responses, from
  :mod:`~lenpred.draft.train_config` (its settings), :mod:`~lenpred.draft.train_data` (the run, its
  split and target, the samples, the state cache, the batch order), :mod:`~lenpred.draft.loss`,
  :mod:`~lenpred.draft.checkpoint` (resuming) and :mod:`~lenpred.draft.distributed` (torchrun).

See docs/draft.md.
"""

from __future__ import annotations

from lenpred.draft.config import DraftConfig, default_layers
from lenpred.draft.io import DraftHead, check_against_target, load_draft, save_draft
from lenpred.draft.model import DraftKV, Eagle3Draft

__all__ = ["DraftConfig", "DraftHead", "DraftKV", "Eagle3Draft", "check_against_target", "default_layers",
           "load_draft", "save_draft"]
