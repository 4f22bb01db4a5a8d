"""Progress, from hand-made times: any long loop's (pipeline.progress: a bar on a terminal, plain lines anywhere
else) and rank 0's training (pipeline.train.progress: the periodic line's rate and ETA)."""

from __future__ import annotations

import io
import logging
import sys

from pipeline import progress as loops
from pipeline.progress import clock, doing, eta_seconds, tracked
from pipeline.train.progress import Progress, bar_kind, progress_line
from pipeline.train.stage import steps_said


def said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cpipe"]


def test_off_a_terminal_a_loop_says_a_line_after_first_seconds_then_every_every_seconds_and_at_its_end(
    caplog, monkeypatch
):
    # Started at 100 s; updates at 105, 111, 125 and 142 s; closed at 150 s.
    times = iter([100.0, 105.0, 111.0, 125.0, 142.0, 150.0])
    monkeypatch.setattr("pipeline.progress.time.monotonic", lambda: next(times))
    with caplog.at_level(logging.INFO, logger="cpipe"), loops.Progress("filter", 100, "docs") as progress:
        for _ in range(4):
            progress.update(10)
    # At 111 s (FIRST 10 s on): 20 docs in 11 s, 80 left at that rate; then nothing until 141 s (EVERY 30 s on):
    # at 142 s, 40 in 42 s, 60 left; the end says all it did.
    assert said(caplog) == [
        "filter 20/100 docs, 1.8 docs/s, ETA 0:44",
        "filter 40/100 docs, 1.0 docs/s, ETA 1:03",
        "filter 40/100 docs in 0:50",
    ]


def test_a_loop_shorter_than_first_says_nothing_and_a_named_one_says_for_whom(caplog, monkeypatch):
    times = iter([0.0, 1.0, 2.0, 3.0, 20.0, 40.0, 41.0])
    monkeypatch.setattr("pipeline.progress.time.monotonic", lambda: next(times))
    with caplog.at_level(logging.INFO, logger="cpipe"):
        assert list(tracked(range(3), "quick", "steps")) == [0, 1, 2]
        assert said(caplog) == []
        with doing("evaluate m"), doing("STSB"):
            with loops.Progress("embedding", unit="pairs") as progress:  # no total: no ETA
                progress.update(400)
    assert said(caplog) == [
        "evaluate m: STSB: embedding 400 pairs, 20.0 pairs/s",
        "evaluate m: STSB: embedding 400 pairs in 0:21",
    ]


def test_bytes_are_counted_in_their_units_and_where_logging_shows_nothing_the_lines_go_to_stderr(capsys, monkeypatch):
    """A Ray worker's "cpipe" logger has no handler and no INFO level: its lines are printed, and Ray prints them."""
    unheard = logging.getLogger("tests.progress.unheard")
    unheard.propagate = False
    monkeypatch.setattr("pipeline.progress.log", unheard)
    times = iter([0.0, 12.0, 16.0])
    monkeypatch.setattr("pipeline.progress.time.monotonic", lambda: next(times))
    with loops.Progress("wiki.part", 4 << 20, "B", initial=1 << 20, scaled=True) as download:
        download.update(2 << 20)  # resumed at 1 MB: 2 MB in 12 s, 1 MB left
    assert capsys.readouterr().err.splitlines() == [
        "wiki.part 3.00MB/4.00MB, 171kB/s, ETA 0:06",
        "wiki.part 3.00MB/4.00MB in 0:16",
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_loop_draws_tqdm_s_bar_and_logs_nothing(caplog, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr("pipeline.progress.DELAY", 0)
    with caplog.at_level(logging.INFO, logger="cpipe"):
        for _ in tracked(range(5), "filter", "docs"):
            pass
    drawn = terminal.getvalue()
    assert drawn.startswith("\rfilter:   0%|") and "| 0/5 [" in drawn and "docs/s]" in drawn, drawn
    assert said(caplog) == []


def test_eta_is_what_is_left_at_the_rate_of_what_this_process_did():
    assert eta_seconds(done=20, total=100, first=0, elapsed=10.0) == 40.0  # 2 steps/s, 80 left
    # Resumed after step 50: the 50 steps skipped took no time; 10 steps in 5 s, 40 left.
    assert eta_seconds(done=60, total=100, first=50, elapsed=5.0) == 20.0
    assert eta_seconds(done=50, total=100, first=50, elapsed=3.0) is None  # nothing timed yet
    assert eta_seconds(done=100, total=100, first=0, elapsed=9.0) == 0.0


def test_clock():
    assert [clock(5), clock(123), clock(3723), clock(59.6), clock(None)] == ["0:05", "2:03", "1:02:03", "1:00", "?"]


def test_the_line_has_step_of_total_loss_lr_rate_and_eta():
    line = progress_line(40, 100, {"loss": 2.345678, "lr": 5e-5}, first=0, elapsed=32.0)
    assert line == "step 40/100 loss 2.346 lr 5.00e-05 1.25 steps/s ETA 0:48"
    assert progress_line(10, 100, {"loss": 1.0, "lr": 1e-3}, first=10, elapsed=0.0).endswith("? steps/s ETA ?")


def test_a_tiny_loss_keeps_its_digits():
    """SimCSE from a sentence-tuned encoder: a loss of 1.2e-05 printed as 0.0000 reads as broken."""
    assert progress_line(5, 10, {"loss": 1.2e-5, "lr": 1e-3}, first=0, elapsed=1.0).startswith(
        "step 5/10 loss 1.2e-05 "
    )


def test_the_train_line_says_why_its_step_count():
    assert steps_said(8256, 64, 250) == "129 steps: one pass over 8,256 pairs at 64 a step, fewer than max_steps 250"
    assert steps_said(8256, 64, None) == "129 steps: one pass over 8,256 pairs at 64 a step"
    assert steps_said(8256, 64, 100) == "100 steps of 64 pairs (max_steps; the 8,256 pairs hold 129)"


def test_off_a_terminal_rank_0_prints_a_line_every_log_every_steps(capsys, monkeypatch):
    assert bar_kind() is None  # pytest's captured stderr is no terminal, and no Ray here
    clock_now = iter([100.0, 104.0, 108.0])
    monkeypatch.setattr("pipeline.train.progress.time.perf_counter", lambda: next(clock_now))
    progress = Progress(total=12, first=2, every=2, kind=None)  # resumed after step 2
    for step in range(3, 7):
        progress.step(step, {"loss": 1.0 / step, "lr": 1e-4})
    progress.close()
    # Steps 4 and 6 only; at step 4, 2 steps in 4 s; at step 6, 4 steps in 8 s: 0.5 steps/s, 6 left.
    assert capsys.readouterr().out.splitlines() == [
        "step 4/12 loss 0.25 lr 1.00e-04 0.50 steps/s ETA 0:16",
        "step 6/12 loss 0.1667 lr 1.00e-04 0.50 steps/s ETA 0:12",
    ]
