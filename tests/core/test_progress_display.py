"""The one progress display: a rich bar on a terminal, a line at most every 60 s into a log, nothing disabled."""

from __future__ import annotations

import io

from lenpred.progress import Progress, clock_text


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_a_line_per_minute_and_one_at_the_end():
    out, clock = io.StringIO(), FakeClock()
    bar = Progress("training", total=100, initial=10, unit="step", stream=out, terminal=False, clock=clock)
    assert not bar.live
    clock.now = 30.0
    bar.update(5)
    assert out.getvalue() == ""  # not a minute yet
    clock.now = 60.0
    bar.update(5, info="loss 1.234")
    # 10 steps this session in 60 s: 1/6 step/s, 80 left -> 480 s
    assert out.getvalue() == "training: 20/100 step, 0.167 step/s, ~0:08:00 left, 0:01:00 elapsed, loss 1.234\n"
    clock.now = 90.0
    bar.update(10)
    assert out.getvalue().count("\n") == 1  # 30 s after the last line
    clock.now = 100.0
    bar.close()
    bar.close()  # a second close writes nothing more
    lines = out.getvalue().splitlines()
    assert lines[1] == "training: 30/100 step, 0.2 step/s, ~0:05:50 left, 0:01:40 elapsed, loss 1.234"
    bar.update(1)
    assert len(out.getvalue().splitlines()) == 2  # closed: updates are ignored


def test_disabled_writes_nothing():
    out, clock = io.StringIO(), FakeClock()
    with Progress("features", total=3, enabled=False, stream=out, terminal=True, clock=clock) as bar:
        clock.now = 600.0
        bar.update(3)
    assert out.getvalue() == "" and not bar.live


def test_no_log_lines_when_the_caller_logs_its_own():
    out, clock = io.StringIO(), FakeClock()
    with Progress("features", total=3, log_every=None, stream=out, terminal=False, clock=clock) as bar:
        clock.now = 600.0
        bar.update(3)
    assert out.getvalue() == ""


def test_nothing_done_leaves_no_final_line():
    out = io.StringIO()
    Progress("teacher forcing", total=50, initial=50, unit="tok", stream=out, terminal=False).close()
    assert out.getvalue() == ""


def test_a_terminal_gets_a_rich_bar():
    out = io.StringIO()
    with Progress("collect", total=8, unit="prompts", stream=out, terminal=True, eta=False) as bar:
        assert bar.live
        bar.update(3, info="12/32 samples")
    text = out.getvalue()
    assert "collect" in text and "3/8" in text and "12/32 samples" in text and "prompts" in text


def test_clock_text():
    assert clock_text(0) == "0:00:00"
    assert clock_text(9216) == "2:33:36"
    assert clock_text(-5) == "0:00:00"
