"""What the terminal shows while the suite runs: one line per call, elapsed and remaining time;
everything the third-party code prints goes to a log file instead, and so does what
``helion_ops`` logs (each specialization's kernel and config).

tritonbench, inductor's max-autotune and Triton print hundreds of lines per input (autotune
tables, progress bars, warnings): they would bury the progress and the summary.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def clock(seconds: float) -> str:
    """Seconds as m:ss (or h:mm:ss)."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Elapsed and remaining time over calls whose relative costs are estimated up front.

    The remaining time is the estimate of the calls left, scaled by how the calls done so far
    compared with their estimate.
    """

    def __init__(self, estimates: list[float], now: float | None = None) -> None:
        self.estimates = estimates
        self.done = 0
        self.start = time.monotonic() if now is None else now

    def line(self, what: str, now: float | None = None) -> str:
        """The line announcing the next call; call ``advance()`` when it is done."""
        elapsed = (time.monotonic() if now is None else now) - self.start
        spent = sum(self.estimates[: self.done])
        scale = elapsed / spent if spent and elapsed else 1.0
        left = scale * sum(self.estimates[self.done :])
        width = len(str(len(self.estimates)))
        return (
            f"[{self.done + 1:{width}d}/{len(self.estimates)}] {what} | "
            f"{clock(elapsed)} elapsed, ~{clock(left)} left"
        )

    def advance(self) -> None:
        self.done += 1


@contextlib.contextmanager
def output_to(log: Path) -> Iterator[None]:
    """Send stdout and stderr, of this process and of any it starts, to the end of ``log``.

    At the file-descriptor level, so that C code, subprocesses (inductor's autotune workers)
    and logging handlers that hold the old ``sys.stderr`` are caught too.
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    with open(log, "a") as file:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(file.fileno(), 1)
        os.dup2(file.fileno(), 2)
        # Python-level writes go to the process's own streams, which write to the
        # descriptors above: a logging handler made in here (tritonbench's) keeps a stream
        # that outlives this block, where ``file`` would be closed by the next call.
        out, err = sys.__stdout__ or file, sys.__stderr__ or file
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                yield
        finally:
            for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                if stream is not None:
                    stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


@contextlib.contextmanager
def configs_logged_to(log: Path) -> Iterator[None]:
    """Append ``helion_ops``'s INFO records to ``log`` while a run lasts: each new
    specialization's kernel, tensors and config, logged when it compiles, so that a run's
    files say what every number ran. (Not passed on to the root logger's handlers, which
    would print them twice into the same log or onto the console.)"""
    logger = logging.getLogger("helion_ops")
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
