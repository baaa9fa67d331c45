"""Step progress of a Ray Train run, drawn as a bar on the driver.

Ray Train reports once per epoch, and a local Ray here keeps the workers' output off the driver
(:func:`rg.runtime.init_ray`), so an epoch of the MetaQA reader (half an hour on 2 CPU cores) showed
nothing until it ended. The rank-0 worker now posts its step count to a :class:`StepBoard` actor at most
once a second, and :class:`DriverBar` polls the board from a thread of the driver while ``fit()`` runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rg.console import user_stream

if TYPE_CHECKING:  # not at run time: the board's actor process imports this module, and rg.training imports torch
    from rg.training.planner_loop import Batch, Progress

POST_EVERY_S = 1.0


class StepBoard:
    """The latest ``(label, steps done, steps in the epoch)`` a worker posted (a Ray actor, see :func:`step_board`)."""

    def __init__(self) -> None:
        self._state: tuple[str, int, int] = ("", 0, 0)

    def post(self, label: str, done: int, total: int) -> None:
        self._state = (label, done, total)

    def read(self) -> tuple[str, int, int]:
        return self._state


def step_board(enabled: bool = True):
    """A :class:`StepBoard` actor (no CPU reserved, so it never waits for a worker's core); None when not
    ``enabled`` (``--no-progress``)."""
    import ray

    return ray.remote(num_cpus=0)(StepBoard).remote() if enabled else None


def posting_progress(board: Any, rank: int = 0) -> Progress | None:
    """The :data:`~rg.training.planner_loop.Progress` of worker ``rank``: rank 0 posts to ``board`` when an
    epoch starts, at most every :data:`POST_EVERY_S` while it runs, and when its last step is done (fire and
    forget). None for the other ranks and without a board."""
    if board is None or rank != 0:
        return None

    def wrap(batches: Sequence[Batch], label: str) -> Iterator[Batch]:
        total, last = len(batches), time.monotonic()
        board.post.remote(label, 0, total)
        for done, batch in enumerate(batches, 1):
            yield batch  # the caller's step on it runs before the loop goes on
            if done == total or time.monotonic() - last >= POST_EVERY_S:
                board.post.remote(label, done, total)
                last = time.monotonic()

    return wrap


class DriverBar:
    """While the block runs, draw the board's latest state as a ``tqdm`` bar (a new bar per label, closed
    at its last step; none for an epoch first seen finished, as the tiny planner's second-long epochs are). A bar
    still open when the next label appears is filled before it closes: that epoch's steps ended between two polls.

    The state is read again on exit, so the last post a worker made is drawn even when the block ends
    between two polls."""

    def __init__(self, board: Any, poll_s: float = 1.0, file: TextIO | None = None) -> None:
        self._board, self._poll_s, self._file = board, poll_s, file or user_stream()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rg-step-bar", daemon=True)
        self._bar: Any = None
        self._label = ""

    def __enter__(self) -> DriverBar:
        if self._board is not None:  # no board (--no-progress): nothing to draw
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._board is None:
            return
        self._stop.set()
        self._thread.join()
        if exc[0] is None:  # after a failed fit() the error is what matters, not the board
            self._draw()
        if self._bar is not None:
            self._bar.close()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            self._draw()

    def _draw(self) -> None:
        import ray
        from tqdm import tqdm

        label, done, total = ray.get(self._board.read.remote())
        if not label:
            return
        if label != self._label:
            if self._bar is not None:  # a worker posts a new label only after the last one's steps are done
                self._bar.update(self._bar.total - self._bar.n)
                self._bar.close()
            self._label, self._bar = label, None
            if done >= total:  # an epoch shorter than a poll: a bar drawn only at its end would show no real rate
                return
            self._bar = tqdm(total=total, desc=label, unit="step", file=self._file)
        if self._bar is None:  # this label's epoch already ended
            return
        self._bar.update(done - self._bar.n)
        self._bar.refresh()  # once a poll: tqdm's own 0.1 s throttle could hide a poll's count
        if done >= total:  # closed now, so its rate is the steps' and not the validation's after them
            self._bar.close()
            self._bar = None
