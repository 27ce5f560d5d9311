"""`lenpred --help` lists every verb with its example; a verb's own help (collect's) shows one too."""

from __future__ import annotations

import pytest

from lenpred.cli import main


def test_help_lists_every_verb_with_example(capsys):
    from lenpred.cli import VERBS

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for verb, (_, _, example) in VERBS.items():
        assert verb in out and example in out
    with pytest.raises(SystemExit):
        main(["collect", "--help"])
    assert "example:" in capsys.readouterr().out
