"""`from lenpred import ...` gives every public object, and `import lenpred` stays cheap."""

from __future__ import annotations

import subprocess
import sys

import lenpred


def test_every_exported_name_resolves():
    missing = [n for n in lenpred.__all__ if getattr(lenpred, n, None) is None]
    assert missing == []


def test_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lenpred.nope  # noqa: B018


def test_import_is_lazy():
    code = "import sys, lenpred; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_data_names_its_public_objects():
    import lenpred.data

    assert [n for n in lenpred.data.__all__ if getattr(lenpred.data, n, None) is None] == []


def test_report_lists_every_module():
    """report/ exports its modules (they share verbs such as ``write_plots``): every one, and no other."""
    import pkgutil

    import lenpred.report

    assert sorted(lenpred.report.__all__) == sorted(m.name for m in pkgutil.iter_modules(lenpred.report.__path__))
