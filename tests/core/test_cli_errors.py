"""The CLI's last line of defence: a file-system error no check foresaw (disk full, a path that
vanished) is one line naming the path and the fix, exit 1; other errors keep their traceback."""

from __future__ import annotations

import errno

import pytest

from lenpred.cli import main


def _raising(exc: BaseException):
    def run(_args: object) -> int:
        raise exc

    return run


def test_file_system_error_is_one_line(monkeypatch, capsys):
    import lenpred.commands.info as info

    monkeypatch.setattr(info, "run", _raising(OSError(errno.ENOSPC, "No space left on device", "/data/out/x.parquet")))
    assert main(["info", "somewhere"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["lenpred info: error: No space left on device: /data/out/x.parquet -- fix: check the "
                                "path, its permissions and the free space (LENPRED_TRACEBACK=1 shows where it happened)"]


def test_other_errors_and_the_debug_switch_keep_the_traceback(monkeypatch):
    import lenpred.commands.info as info

    monkeypatch.setattr(info, "run", _raising(ConnectionRefusedError(errno.ECONNREFUSED, "refused")))
    with pytest.raises(ConnectionRefusedError):  # no file name: not a file-system error, a bug to see
        main(["info", "somewhere"])
    monkeypatch.setattr(info, "run", _raising(PermissionError(errno.EACCES, "Permission denied", "/x")))
    monkeypatch.setenv("LENPRED_TRACEBACK", "1")
    with pytest.raises(PermissionError):
        main(["info", "somewhere"])
