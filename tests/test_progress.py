"""Rank 0's training progress (pipeline.train.progress): the periodic line's rate and ETA, from hand-made times."""

from __future__ import annotations

from pipeline.train.progress import Progress, bar_kind, clock, eta_seconds, progress_line
from pipeline.train.stage import steps_said


def test_eta_is_the_steps_left_at_the_rate_of_the_steps_this_process_took():
    assert eta_seconds(step=20, total=100, first=0, elapsed=10.0) == 40.0  # 2 steps/s, 80 left
    # Resumed after step 50: the 50 steps skipped took no time; 10 steps in 5 s, 40 left.
    assert eta_seconds(step=60, total=100, first=50, elapsed=5.0) == 20.0
    assert eta_seconds(step=50, total=100, first=50, elapsed=3.0) is None  # nothing timed yet
    assert eta_seconds(step=100, total=100, first=0, elapsed=9.0) == 0.0


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
