"""Files: what lenpred writes and reads, and how.

* :mod:`~lenpred.io.artifacts` -- an artifact folder (its ``meta.json``: kind, schema, config, run card
  hash, package version) and the rule that refuses to mix artifacts of different cards or models;
* :mod:`~lenpred.io.outputs` -- the ``--out`` rule of every command (what may be overwritten, resume);
* :mod:`~lenpred.io.card` -- a run card's identity fields and hash;
* :mod:`~lenpred.io.fileio` -- atomic writes (a temporary file renamed into place);
* :mod:`~lenpred.io.paths` -- where lenpred keeps its cache.
"""
