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


def test_a_reader_closing_the_pipe_is_not_an_error(tmp_path):
    """`lenpred ... | head`: the reader leaves early; the verb stops quietly with exit 0 (it was a
    BrokenPipeError traceback). A real pipe, and output far larger than the pipe's buffer."""
    import subprocess
    import sys

    code = ("import sys, lenpred.cli as c, lenpred.commands.info as info\n"
            "def run(_a):\n"
            "    for i in range(200000):\n"
            "        print('line', i)\n"
            "    return 0\n"
            "info.run = run\n"
            "sys.exit(c.main(['info', 'x']))\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline().startswith(b"line 0")
    p.stdout.close()  # the reader is gone; the writer still has ~2 MB to print
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"BrokenPipe" not in err


def test_python_dash_m_lenpred_runs_the_cli_from_the_source_tree(tmp_path):
    """`python -m lenpred` works with the package on PYTHONPATH only (no console script): how a lent GPU
    machine without network runs it; its exit status is the CLI's."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    ok = subprocess.run([sys.executable, "-m", "lenpred", "--help"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0 and "lenpred" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "lenpred", "no-such-verb"], env=env, cwd=tmp_path, capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "no-such-verb" in bad.stderr
