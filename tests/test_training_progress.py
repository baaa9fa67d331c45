"""Step progress of Ray Train runs: what a worker posts, and the bar the driver draws from it."""

import io

import ray

from rg import train_progress as progress
from rg.train_progress import DriverBar, posting_progress, step_board


def test_a_worker_posts_the_start_and_the_end_of_each_epoch_and_passes_every_batch_through(ray_local, monkeypatch):
    monkeypatch.setattr(progress, "POST_EVERY_S", 3600.0)  # no posts in between
    board = step_board()
    batches = [{"i": i} for i in range(5)]
    wrap = posting_progress(board)
    seen = []
    for batch in wrap(batches, "reader epoch 1/2"):
        seen.append(batch)
        if len(seen) == 1:
            assert ray.get(board.read.remote()) == ("reader epoch 1/2", 0, 5)  # posted before the first step
    assert seen == batches
    assert ray.get(board.read.remote()) == ("reader epoch 1/2", 5, 5)
    assert posting_progress(board, rank=1) is None and posting_progress(None) is None  # rank 0 only; --no-progress


def test_the_driver_draws_a_bar_per_epoch_with_the_last_posted_count(ray_local):
    board = step_board()
    out = io.StringIO()
    with DriverBar(board, poll_s=3600.0, file=out):  # drawn only on exit
        ray.get(board.post.remote("planner epoch 1/1", 7, 9))
    text = out.getvalue()
    assert "planner epoch 1/1" in text and "7/9" in text
    empty = io.StringIO()
    with DriverBar(step_board(), poll_s=3600.0, file=empty):
        pass
    assert empty.getvalue() == ""  # nothing posted, nothing drawn
    assert step_board(enabled=False) is None
    with DriverBar(None, file=empty):  # --no-progress: no board, no thread
        pass
    assert empty.getvalue() == ""


def test_a_finished_epoch_closes_its_bar_and_the_next_label_opens_a_new_one(ray_local):
    board = step_board()
    out = io.StringIO()
    bar = DriverBar(board, poll_s=3600.0, file=out)
    for label, done in (("reader epoch 1/3", 1), ("reader epoch 1/3", 3), ("reader epoch 2/3", 3), ("reader epoch 3/3", 1)):
        ray.get(board.post.remote(label, done, 3))
        bar._draw()
    lines = [line for line in out.getvalue().replace("\r", "\n").splitlines() if line.strip()]
    assert any(line.startswith("reader epoch 1/3: 100%") and "3/3" in line for line in lines)
    assert not any(line.startswith("reader epoch 2/3") for line in lines)  # first seen finished: no bar
    assert lines[-1].startswith("reader epoch 3/3") and "1/3" in lines[-1]


def test_an_epoch_that_ends_between_two_polls_is_drawn_full_not_at_its_last_polled_count(ray_local):
    board = step_board()
    out = io.StringIO()
    bar = DriverBar(board, poll_s=3600.0, file=out)
    for label, done in (("planner epoch 1/2", 0), ("planner epoch 2/2", 0)):  # epoch 1's 13 steps fell between polls
        ray.get(board.post.remote(label, done, 13))
        bar._draw()
    lines = [line for line in out.getvalue().replace("\r", "\n").splitlines() if line.strip()]
    epoch1 = [line for line in lines if line.startswith("planner epoch 1/2")]
    assert epoch1 and "13/13" in epoch1[-1] and "100%" in epoch1[-1]
    assert lines[-1].startswith("planner epoch 2/2") and "0/13" in lines[-1]
